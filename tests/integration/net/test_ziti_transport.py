"""The Ziti dial path (R2, R8, R14): httpx over an httpcore pool whose backend dials by address.

No controller or edge router can run here, so the SDK's ``ctx.connect((host, port))`` is stood in
for by a dial returning a real connected socket to a loopback HTTP server: the plumbing between
httpx and the dial carries real bytes. Where the real 0.6 SDK can answer without a controller (a
dial to an address no service intercepts), it runs for real in a child process.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from monky_deployd import config
from monky_deployd.adapters.net import ziti
from monky_deployd.adapters.net.identity import Identity
from monky_deployd.core import faults
from monky_deployd_testkit.fakes.http import LoopbackServer, Request, Response, json_response
from tests.integration.net.test_identity import identity_json, write

SRC = Path(__file__).resolve().parents[3] / "src"
IN_POD_PORT = 8081  # the tenancy pod's in-pod listener: never an intercept


class Recorder(LoopbackServer):
    """Answers like tenancy (POST) and OpenBao (GET), recording every request byte for byte."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []

    def record(self, req: Request) -> None:
        with self.lock:
            self.seen.append(
                {
                    "method": req.method,
                    "path": req.target,
                    "headers": dict(req.headers.items()),
                    "body": req.body,
                    "peer": req.peer,
                }
            )

    def route(self, req: Request) -> Response:
        if req.method == "POST":
            return json_response(200, {"revision": "r42", "echo": req.json()})
        if req.method == "GET" and req.path == "/v1/kv/data/envs/env-dev-08/app":
            return json_response(200, {"data": {"data": {"db_password": "s3cret"}, "metadata": {}}})
        if req.method == "GET":
            return json_response(404, {"errors": []})
        return json_response(501, {"errors": [f"{req.method} is not supported"]})


@pytest.fixture
def server() -> Iterator[Recorder]:
    with Recorder() as srv:
        yield srv


def cfg(**overrides: Any) -> config.Config:
    return config.parse({"env": "env-dev-08", **overrides}, "test")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_tenancy_and_openbao_requests_carry_real_bytes(server: Recorder) -> None:
    dialled: list[tuple[str, int]] = []

    def dial(addr: tuple[str, int]) -> socket.socket:
        dialled.append(addr)
        return socket.create_connection((server.host, server.port), timeout=5)

    conf = cfg()
    transport = ziti.ZitiTransport(dial, services=ziti.expected_services(conf))
    with httpx.Client(transport=transport, timeout=5) as client:
        tenancy = f"http://{conf.tenancy.host}:{conf.tenancy.port}"
        bao = f"http://{conf.openbao.host}:{conf.openbao.port}"
        for n in range(3):
            answer = client.post(
                f"{tenancy}/v1/envs/env-dev-08/checkin",
                json={"agent": {"version": "0.1.0"}, "applied": None, "n": n},
                headers={"Authorization": "Bearer lease-token"},
            )
            assert answer.status_code == 200
            assert answer.json()["echo"]["n"] == n
        secret = client.get(
            f"{bao}/v1/kv/data/envs/env-dev-08/app", headers={"X-Vault-Token": "lease-token"}
        )
        assert secret.json()["data"]["data"] == {"db_password": "s3cret"}
        assert client.get(f"{bao}/v1/kv/data/envs/env-dev-08/none").status_code == 404

    # The dial got the intercept addresses as they are (no DNS), once per address: pooled.
    assert dialled == [("tenancy.monky.ziti", 443), ("openbao.monky.ziti", 8200)]
    seen = server.seen
    assert [(r["method"], r["path"]) for r in seen] == [
        ("POST", "/v1/envs/env-dev-08/checkin"),
        ("POST", "/v1/envs/env-dev-08/checkin"),
        ("POST", "/v1/envs/env-dev-08/checkin"),
        ("GET", "/v1/kv/data/envs/env-dev-08/app"),
        ("GET", "/v1/kv/data/envs/env-dev-08/none"),
    ]
    assert seen[0]["headers"]["Host"] == "tenancy.monky.ziti:443"
    assert seen[0]["headers"]["Authorization"] == "Bearer lease-token"
    assert json.loads(seen[2]["body"]) == {"agent": {"version": "0.1.0"}, "applied": None, "n": 2}
    assert seen[3]["headers"]["Host"] == "openbao.monky.ziti:8200"
    assert seen[3]["headers"]["X-Vault-Token"] == "lease-token"
    assert len({r["peer"] for r in seen[:3]}) == 1  # one connection carried the three POSTs


def test_a_large_body_crosses_intact(server: Recorder) -> None:
    def dial(addr: tuple[str, int]) -> socket.socket:
        return socket.create_connection((server.host, server.port), timeout=5)

    payload = {"blob": "x" * 3_000_000}
    with httpx.Client(transport=ziti.ZitiTransport(dial), timeout=10) as client:
        answer = client.post("http://tenancy.monky.ziti:443/v1/envs/e/reports", json=payload)
    assert answer.json()["echo"] == payload


def test_refused_dial_names_host_port_service_and_what_to_check() -> None:
    port = closed_port()

    def dial(addr: tuple[str, int]) -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=5)

    conf = cfg()
    ident = Identity(
        path=Path("/opt/openziti/etc/identities/env-dev-08.json"),
        controllers=("https://ctrl.monky.example:1280",),
        subject="CN=env-dev-08",
        not_after=dt.datetime.now(dt.UTC),
    )
    transport = ziti.ZitiTransport(dial, services=ziti.expected_services(conf), identity=ident)
    with httpx.Client(transport=transport, timeout=5) as client:
        with pytest.raises(faults.DeployError) as err:
            client.post("http://tenancy.monky.ziti:443/v1/envs/env-dev-08/lease")
        assert str(err.value).startswith(
            "ZITI_NO_SERVICE: no Ziti service intercepts tenancy.monky.ziti:443 for this "
            "identity (expected there: tenancy's deploy API (Ziti service monky.tenancy.deploy))"
        )
        assert "#monky-deploy-agent (an operator adds it on the controller" in err.value.hint
        assert "port 443, never the in-pod listener's port" in err.value.hint
        assert "https://ctrl.monky.example:1280" in err.value.hint
        assert "Connection refused" in err.value.detail

        with pytest.raises(faults.DeployError) as err:
            client.get("http://openbao.monky.ziti:8200/v1/auth/token/lookup-self")
        assert err.value.code == "ZITI_NO_SERVICE"
        assert "openbao.monky.ziti:8200" in err.value.message
        assert "#openbao-client" in err.value.hint


def test_the_in_pod_port_in_config_is_called_out() -> None:
    def dial(addr: tuple[str, int]) -> socket.socket:
        raise ConnectionRefusedError(111, "Connection refused")

    conf = cfg(tenancy={"port": IN_POD_PORT})  # the field's wrong port, the in-pod listener
    transport = ziti.ZitiTransport(dial, services=ziti.expected_services(conf))
    client = httpx.Client(transport=transport, timeout=5)
    with client, pytest.raises(faults.DeployError) as err:
        client.get(f"http://tenancy.monky.ziti:{IN_POD_PORT}/")  # in-pod port, refused
    assert err.value.code == "ZITI_NO_SERVICE"
    assert err.value.hint.startswith(
        f"tenancy.port in config.yaml is {IN_POD_PORT} but the monky.tenancy.deploy intercept "
        "is 443"  # and the in-pod listener is named as such
    )


def test_a_bare_sdk_exception_becomes_a_named_dial_failure() -> None:
    def dial(addr: tuple[str, int]) -> socket.socket:
        raise Exception(-17, "ziti context is not authenticated")  # 0.6 check_error's shape

    client = httpx.Client(transport=ziti.ZitiTransport(dial), timeout=5)
    with client, pytest.raises(faults.DeployError) as err:
        client.get("http://tenancy.monky.ziti:443/")
    assert str(err.value).startswith(
        "ZITI_DIAL_FAILED: the Ziti dial to tenancy.monky.ziti:443 (no service the agent knows) "
        "failed: ziti context is not authenticated (error -17)"
    )


def test_a_dial_that_never_completes_is_bounded() -> None:
    release = threading.Event()

    def dial(addr: tuple[str, int]) -> socket.socket:
        release.wait(30)
        raise ConnectionAbortedError("released")

    try:
        client = httpx.Client(transport=ziti.ZitiTransport(dial), timeout=0.5)
        with client, pytest.raises(faults.DeployError) as err:
            client.get("http://openbao.monky.ziti:8200/v1/sys/health")
    finally:
        release.set()
    assert err.value.code == "ZITI_DIAL_TIMEOUT"
    assert "openbao.monky.ziti:8200" in err.value.message


def test_a_server_that_hangs_up_is_httpx_own_error() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def dial(addr: tuple[str, int]) -> socket.socket:
            return socket.create_connection(listener.getsockname(), timeout=5)

        def hang_up() -> None:
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.close()

        threading.Thread(target=hang_up, daemon=True).start()
        client = httpx.Client(transport=ziti.ZitiTransport(dial), timeout=5)
        with client, pytest.raises(httpx.RemoteProtocolError):
            client.get("http://tenancy.monky.ziti:443/")


def test_the_real_06_sdk_refusal_is_no_service() -> None:
    """The 0.6 SDK with no service for the address raises Exception(111, ...): no OSError."""
    script = (
        "import httpx, openziti.zitilib as zl\n"
        "from openziti.context import ZitiContext\n"
        "from monky_deployd import config\n"
        "from monky_deployd.adapters.net import ziti\n"
        "from monky_deployd.core import faults\n"
        "zl.init()\n"
        "conf = config.parse({'env': 'env-dev-08'}, 'test')\n"
        "t = ziti.ZitiTransport(ziti.sdk_dial(ZitiContext(0)),\n"
        "                       services=ziti.expected_services(conf))\n"
        "try:\n"
        "    httpx.Client(transport=t, timeout=10).get('http://tenancy.monky.ziti:443/')\n"
        "except faults.DeployError as exc:\n"
        "    print(str(exc).splitlines()[0]); print(exc.detail)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert proc.returncode == 0, proc.stderr
    first, detail = proc.stdout.splitlines()[:2]
    assert first.startswith("ZITI_NO_SERVICE: no Ziti service intercepts tenancy.monky.ziti:443")
    assert "111" in detail


def test_a_plain_tcp_fallback_of_the_sdk_is_refused() -> None:
    """openziti >= 1.7 falls back to plain TCP silently; such a socket has ``_zitifd = None``."""

    class FellBack(socket.socket):
        _zitifd = None

    class Context:
        def connect(self, addr: tuple[str, int]) -> socket.socket:
            return FellBack()

    with pytest.raises(ConnectionRefusedError):
        ziti.sdk_dial(Context())(("tenancy.monky.ziti", 443))


def test_sdk_1x_load_result_shape(tmp_path: Path) -> None:
    """>= 1.3 returns (ctx, err) and does not raise: err is checked and named."""
    with socket.socket() as controller:
        controller.bind(("127.0.0.1", 0))
        controller.listen(1)
        port = controller.getsockname()[1]
        ident = Identity(
            path=tmp_path / "id.json",
            controllers=(f"https://127.0.0.1:{port}",),
            subject="CN=env-dev-08",
            not_after=dt.datetime.now(dt.UTC),
        )
        ctx = object()
        assert ziti.interpret_load_result((ctx, 0), ident, str) is ctx
        with pytest.raises(faults.DeployError) as err:
            ziti.interpret_load_result((0, -22), ident, lambda e: "NOT_AUTHORIZED")
    assert err.value.code == "ZITI_LOAD_FAILED"
    assert "error -22 (NOT_AUTHORIZED)" in err.value.message

    with pytest.raises(faults.DeployError) as err:
        ziti.interpret_load_result((0, -15), ident, lambda e: "CONTROLLER_UNAVAILABLE")
    assert err.value.code == "ZITI_CONTROLLER_UNREACHABLE"  # the listener is gone now


def test_open_transport_uses_the_sdk_and_never_monkeypatches(tmp_path: Path) -> None:
    """After open_transport (failing at the controller), socket.socket is still the stdlib's."""
    path = write(tmp_path / "id.json", identity_json(f"https://127.0.0.1:{closed_port()}"))
    script = (
        "import json, socket, sys\n"
        "orig = socket.socket, socket.create_connection, socket.getaddrinfo\n"
        "from monky_deployd import config\n"
        "from monky_deployd.adapters.net import ziti\n"
        "from monky_deployd.core import faults\n"
        "cfg = config.parse(json.loads(sys.argv[1]), 'test')\n"
        "try:\n"
        "    ziti.open_transport(cfg)\n"
        "except faults.DeployError as exc:\n"
        "    print(exc.code)\n"
        "print((socket.socket, socket.create_connection, socket.getaddrinfo) == orig)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps({"env": "env-dev-08", "identity": str(path)})],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ZITI_CONTROLLER_UNREACHABLE", "True"]


def test_the_load_timeout_reaches_sdks_that_take_one() -> None:
    """0.6/1.3: load(path); 1.4+: load(path, timeout=<ms>); a future timeout_ms keyword too."""
    calls: list[tuple[str, int | None]] = []

    class Sdk06:
        @staticmethod
        def load(path: str) -> object:
            calls.append((path, None))
            return object()

    class Sdk14:
        @staticmethod
        def load(path: str, timeout: int = 0) -> tuple[object, int]:
            calls.append((path, timeout))
            return object(), 0

    class SdkMs:
        @staticmethod
        def load(path: str, timeout_ms: int = 0) -> tuple[object, int]:
            calls.append((path, timeout_ms))
            return object(), 0

    for sdk in (Sdk06, Sdk14, SdkMs):
        ziti._load_call(sdk, "/id.json", 2.5)()
    assert calls == [("/id.json", None), ("/id.json", 2500), ("/id.json", 2500)]
