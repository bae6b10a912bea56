"""The agent's one HTTP client for tenancy and OpenBao.

``transport: plain`` dials the configured host:port directly (a tunneler intercepts the Ziti
addresses for the box, or tests point them at loopback). ``transport: ziti`` hands the client an
httpx transport that dials through the OpenZiti SDK (``ziti.open_transport``). ``wire`` replaces
the plain transport (tests serve the loopback fakes in-process with an ``httpx.MockTransport``);
the client's timeouts and settings stay the same (but the overall deadlines are the socket
transports' doing: a ``wire`` has no sockets to cut).
"""

from __future__ import annotations

import httpx

from monky_deployd.adapters.httpio import PoolTransport
from monky_deployd.adapters.tls import no_tls
from monky_deployd.config import Config


def open_client(cfg: Config, wire: httpx.BaseTransport | None = None) -> httpx.Client:
    timeout = httpx.Timeout(max(cfg.tenancy.timeout_s, cfg.openbao.timeout_s), connect=10.0)
    if cfg.transport == "ziti":
        from monky_deployd.adapters.net import ziti  # the SDK loads only when it is used

        return httpx.Client(
            transport=ziti.open_transport(cfg), timeout=timeout, trust_env=False, verify=no_tls()
        )
    if wire is not None:
        return httpx.Client(transport=wire, timeout=timeout, trust_env=False)
    return httpx.Client(
        transport=PoolTransport(ssl_context=no_tls()), timeout=timeout, trust_env=False
    )
