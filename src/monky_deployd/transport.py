"""The agent's one HTTP client for tenancy and OpenBao.

``transport: plain`` dials the configured host:port directly (a tunneler intercepts the Ziti
addresses for the box, or tests point them at loopback). ``transport: ziti`` hands the client an
httpx transport that dials through the OpenZiti SDK (``ziti.open_transport``).
"""

from __future__ import annotations

import ssl

import httpx

from .config import Config


def no_tls() -> ssl.SSLContext:
    """A TLS context that trusts nothing: every agent connection is plain HTTP (inside a Ziti
    circuit, a tunneler's intercept, or a local socket), so an https URL fails closed. It also
    spares each tick the ~50 ms of loading the system CA bundle that httpx does by default."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def open_client(cfg: Config) -> httpx.Client:
    timeout = httpx.Timeout(max(cfg.tenancy.timeout_s, cfg.openbao.timeout_s), connect=10.0)
    if cfg.transport == "ziti":
        from . import ziti  # the SDK loads only when it is used

        return httpx.Client(
            transport=ziti.open_transport(cfg), timeout=timeout, trust_env=False, verify=no_tls()
        )
    return httpx.Client(timeout=timeout, trust_env=False, verify=no_tls())
