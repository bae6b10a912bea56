"""One translator for both services: the same class of fault gets the same kind of answer from
tenancy's and OpenBao's clients (real loopback sockets)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.config import OpenBaoCfg, TenancyCfg
from monky_deployd.core.errors import Code, DeployError, TransportError
from monky_deployd_testkit.dockerlab import free_port


@pytest.fixture
def not_http() -> Iterator[int]:
    """A port that answers like an SSH server: bytes that are not HTTP, then close."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join(2)
    srv.close()


def tenancy_fault(port: int) -> DeployError:
    with httpx.Client() as http:
        t = Tenancy(
            http, TenancyCfg(host="127.0.0.1", port=port), "env-dev-08", max_body_bytes=1000
        )
        with pytest.raises(DeployError) as exc:
            t.lease("s.token")
    return exc.value


def bao_fault(port: int) -> DeployError:
    with httpx.Client() as http, pytest.raises(DeployError) as exc:
        Bao(http, OpenBaoCfg(host="127.0.0.1", port=port)).lookup_self("s.token")
    return exc.value


def test_a_closed_port_is_unreachable_for_both() -> None:
    port = free_port()  # nothing listens there
    t, b = tenancy_fault(port), bao_fault(port)
    assert (t.code, b.code) == (Code.TENANCY_UNREACHABLE, Code.OPENBAO_UNREACHABLE)
    assert isinstance(t, TransportError) and isinstance(b, TransportError)
    assert t.message.startswith(f"cannot reach tenancy at 127.0.0.1:{port}")
    assert b.message.startswith(f"cannot reach OpenBao at 127.0.0.1:{port}")


def test_a_port_that_is_not_http_is_a_bad_answer_for_both(not_http: int) -> None:
    t, b = tenancy_fault(not_http), bao_fault(not_http)
    assert (t.code, b.code) == (Code.TENANCY_BAD_RESPONSE, Code.OPENBAO_BAD_RESPONSE)
    assert "something that is not HTTP" in t.message and "POST /lease" in t.message
    assert "something that is not HTTP" in b.message and "lookup-self" in b.message
    assert "s.token" not in str(t) + str(b)
