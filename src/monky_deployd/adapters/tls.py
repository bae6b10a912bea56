"""TLS for the agent's HTTP clients (tenancy, OpenBao, the Docker engine)."""

from __future__ import annotations

import ssl


def no_tls() -> ssl.SSLContext:
    """A TLS context that trusts nothing: every agent connection is plain HTTP (inside a Ziti
    circuit, a tunneler's intercept, or a local socket), so an https URL fails closed. It also
    spares each tick the ~50 ms of loading the system CA bundle that httpx does by default."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
