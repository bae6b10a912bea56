"""One translator for both services: the same class of fault gets the same kind of answer from
tenancy's and OpenBao's clients (real loopback sockets)."""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator

import httpx
import pytest

from monky_deployd.adapters.net import httperrors
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.config import OpenBaoCfg, TenancyCfg
from monky_deployd.core.commands import fixes
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd_testkit.dockerlab import free_port


@pytest.fixture
def not_http() -> Iterator[int]:
    """A port that answers like an SSH server: its banner, then end of stream; it reads what the
    client sends until the client hangs up (closing on unread bytes would be a reset instead)."""
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
                conn.settimeout(5)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
                conn.shutdown(socket.SHUT_WR)
                with contextlib.suppress(OSError):
                    while conn.recv(4096):
                        pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join(2)
    srv.close()


@pytest.fixture
def stalls() -> Iterator[int]:
    """A port whose listener never accepts: the kernel completes the handshake, nobody answers."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        yield srv.getsockname()[1]


def tenancy_fault(port: int, timeout_s: float = 15.0, host: str = "127.0.0.1") -> DeployError:
    cfg = TenancyCfg(host=host, port=port, timeout_s=timeout_s)
    with httpx.Client() as http:
        t = Tenancy(http, cfg, "env-dev-08", max_body_bytes=1000)
        with pytest.raises(DeployError) as exc:
            t.lease("s.token")
    return exc.value


def bao_fault(port: int, timeout_s: float = 15.0, host: str = "127.0.0.1") -> DeployError:
    cfg = OpenBaoCfg(host=host, port=port, timeout_s=timeout_s)
    with httpx.Client() as http, pytest.raises(DeployError) as exc:
        Bao(http, cfg).lookup_self("s.token")
    return exc.value


def test_a_closed_port_is_unreachable_for_both() -> None:
    port = free_port()  # nothing listens there
    t, b = tenancy_fault(port), bao_fault(port)
    assert (t.code, b.code) == (Code.TENANCY_UNREACHABLE, Code.OPENBAO_UNREACHABLE)
    assert t.code.family == b.code.family == "transport"
    assert t.message.startswith(f"cannot reach tenancy at 127.0.0.1:{port}")
    assert b.message.startswith(f"cannot reach OpenBao at 127.0.0.1:{port}")


def test_a_port_that_is_not_http_is_a_bad_answer_for_both(not_http: int) -> None:
    t, b = tenancy_fault(not_http), bao_fault(not_http)
    assert (t.code, b.code) == (Code.TENANCY_BAD_RESPONSE, Code.OPENBAO_BAD_RESPONSE)
    assert "something that is not HTTP" in t.message and "POST /lease" in t.message
    assert "something that is not HTTP" in b.message and "lookup-self" in b.message
    assert "s.token" not in str(t) + str(b)


def test_a_server_that_stalls_is_a_timeout_for_both(stalls: int) -> None:
    t, b = tenancy_fault(stalls, 0.3), bao_fault(stalls, 0.3)
    # OpenBao has no timeout code of its own: its timeout is OPENBAO_UNREACHABLE (documented)
    assert (t.code, b.code) == (Code.TENANCY_TIMEOUT, Code.OPENBAO_UNREACHABLE)
    assert t.message == f"tenancy at 127.0.0.1:{stalls} did not answer POST /lease within 0.3 s"
    assert b.message.startswith(f"OpenBao at 127.0.0.1:{stalls} did not answer ")
    assert b.message.endswith(" within 0.3 s")
    assert "tenancy.timeout_s" in t.hint and "openbao.timeout_s" in b.hint


def test_a_name_that_does_not_resolve_says_so_with_the_command_doctor_prints() -> None:
    """transport plain: the tunneler's DNS answers the intercept names (issue 36); the hint is
    ``core.commands.fixes.unresolved`` for this box, as doctor's intercept checks print it."""
    host = f"monky-{uuid.uuid4().hex[:8]}.invalid"  # RFC 6761: never resolves
    t, b = tenancy_fault(443, host=host), bao_fault(8200, host=host)
    assert (t.code, b.code) == (Code.TENANCY_UNREACHABLE, Code.OPENBAO_UNREACHABLE)
    assert t.message.startswith(
        f"cannot reach tenancy at {host}:443: its name {host} does not resolve on this box ("
    ), t.message
    assert b.message.startswith(f"cannot reach OpenBao at {host}:8200: its name {host} does ")
    assert t.hint == b.hint == httperrors.unresolved_fix()
    assert t.hint in {
        fixes.remove_run_host_dropin(),
        fixes.start_tunneler(installed=True),
        fixes.start_tunneler(installed=False),
    }
    refused = tenancy_fault(free_port())  # a port, not a name: the route's words stay
    assert "does not resolve" not in refused.message and refused.hint != t.hint
