"""The Engine API's container list, malformed: a loopback engine on a unix socket (the agent's
own transport, as to /var/run/docker.sock) answers ``GET /containers/json`` with JSON that is
not a list of containers. Every reader of that list refuses it at once as the engine's fault
(DOCKER_UNAVAILABLE, naming the socket), and the verify phase does not mistake it for "no
containers" and wait out its deadline (before, it polled an empty project until
``verify.deadline_s``)."""

from __future__ import annotations

import json
import shutil
import socketserver
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd import config as config_mod
from monky_deployd.adapters.box.docker import docker_api, watch
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent import context
from monky_deployd.agent.apply import steps
from monky_deployd.agent.commands import status
from monky_deployd.config import DockerCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle.boxsteps import Verify
from monky_deployd.core.records.applied import Applied
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.fakes.clock import Clock

PROJECT = "shop"


class _Handler(BaseHTTPRequestHandler):
    body: ClassVar[bytes] = b"[]"
    inspection: ClassVar[bytes] = b"{}"
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.paths.append(self.path.partition("?")[0])
        body = self.body if self.path.startswith("/containers/json") else self.inspection
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:  # a unix socket's peer has no address
        return "unix"

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Engine:
    """A loopback Engine API on a unix socket; ``answer`` is its container list's body."""

    def __init__(self, sock: Path) -> None:
        self.sock = sock
        self.handler: type[_Handler] = type("Handler", (_Handler,), {"paths": []})
        self.server = socketserver.ThreadingUnixStreamServer(str(sock), self.handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, body: bytes, inspection: bytes = b"{}") -> None:
        self.handler.body, self.handler.inspection = body, inspection
        self.handler.paths.clear()

    @property
    def paths(self) -> list[str]:
        return self.handler.paths

    @property
    def cfg(self) -> DockerCfg:
        return DockerCfg(host=f"unix://{self.sock}")


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    home = Path(tempfile.mkdtemp(prefix="eng"))  # short: a socket path has at most 107 bytes
    eng = Engine(home / "docker.sock")
    eng.thread.start()
    try:
        yield eng
    finally:
        eng.server.shutdown()
        eng.server.server_close()
        shutil.rmtree(home, ignore_errors=True)


JSON_SCALAR = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
JSON = st.recursive(
    JSON_SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
# a value that is not a list, or a list with at least one row that is not an object
NOT_A_LIST = (
    st.dictionaries(st.text(max_size=8), JSON, max_size=3)
    | JSON_SCALAR
    | st.lists(JSON.filter(lambda v: not isinstance(v, dict)), min_size=1, max_size=3).flatmap(
        lambda bad: st.lists(st.just({"Id": "0" * 64}), max_size=2).map(lambda ok: ok + bad)
    )
)
NOT_JSON = st.sampled_from([b"<html>proxy error</html>", b"", b"[{", b"\xff\xfe"])

READERS: dict[str, Callable[[DockerCfg], object]] = {
    "inspect_project": lambda cfg: watch.inspect_project(cfg, PROJECT),
    "project_containers": lambda cfg: docker_api.project_containers(cfg, PROJECT),
    "project_working_dirs": lambda cfg: docker_api.project_working_dirs(cfg, PROJECT),
}


def assert_engines_fault(err: DeployError, engine: Engine) -> None:
    assert err.code is Code.DOCKER_UNAVAILABLE
    assert err.message.startswith(f"the Docker engine at {engine.sock} answered GET /containers")
    assert "not a JSON list of containers" in err.message


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=NOT_A_LIST.map(lambda v: json.dumps(v).encode()) | NOT_JSON,
    reader=st.sampled_from(sorted(READERS)),
)
def test_a_container_list_that_is_not_one_is_the_engines_fault(
    engine: Engine, body: bytes, reader: str
) -> None:
    engine.answer(body)
    with pytest.raises(DeployError) as info:
        READERS[reader](engine.cfg)
    assert_engines_fault(info.value, engine)
    assert engine.paths == ["/containers/json"]  # refused at the list: no container inspected


@pytest.mark.parametrize("body", [b"{}", b'"running"', b"null", b'{"message": "page not found"}'])
def test_verify_names_the_engine_at_its_first_poll_not_a_timeout(
    engine: Engine, body: bytes, tmp_path: Path
) -> None:
    engine.answer(body)
    cfg = config_mod.parse(
        {
            "env": "env-api-01",
            "docker": {"host": f"unix://{engine.sock}"},
            "verify": {"stable_s": 30, "deadline_s": 180, "poll_s": 5},
        },
        "test",
    )
    clock, sleeps = Clock(0.0), list[float]()

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)

    rec = TickRecord(tick_id="t", started_at=0.0)
    state = StateDir(tmp_path / "state").ensure()
    ctx = context.Context(cfg, state, rec, clock.now, watch_clock=clock.now, sleep=sleep)
    with pytest.raises(DeployError) as info:
        steps.verify(ctx, Verify(PROJECT, "r1", ("web",)))
    assert sleeps == []  # not one poll waited: the first answer was already the fault
    assert_engines_fault(info.value, engine)
    assert engine.paths == ["/containers/json"]


def test_status_says_the_engine_answered_badly_not_that_nothing_runs(engine: Engine) -> None:
    engine.answer(b"{}")
    cfg = config_mod.parse({"env": "env-api-01", "docker": {"host": f"unix://{engine.sock}"}}, "t")
    out = status.services(cfg, Applied("r1", PROJECT, ["web"]), 0.0)
    assert out["engine"].startswith("unreachable: DOCKER_UNAVAILABLE: the Docker engine at")
    assert out["containers"] == []


def test_a_well_formed_list_still_reads(engine: Engine) -> None:
    engine.answer(b"[]")
    assert watch.inspect_project(engine.cfg, PROJECT) == []
    assert engine.paths == ["/containers/json"]


# an inspection that is JSON but not of a container's shape, where the agent reads it
BAD_INSPECTION = st.sampled_from(
    [
        [],
        "x",
        {"State": "running"},
        {"State": {"Health": {"Log": {"a": 1}}}},
        {"State": {"ExitCode": "one"}},
        {"State": {"ExitCode": 1e400}},
        {"Config": ["web"]},
        {"HostConfig": {"RestartPolicy": "always"}},
    ]
)


@settings(
    max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(inspection=BAD_INSPECTION)
def test_an_inspection_not_of_a_containers_shape_is_the_engines_fault(
    engine: Engine, inspection: object
) -> None:
    cid = "a" * 64
    engine.answer(json.dumps([{"Id": cid}]).encode(), json.dumps(inspection).encode())
    with pytest.raises(DeployError) as info:
        watch.inspect_project(engine.cfg, PROJECT)
    assert info.value.code is Code.DOCKER_UNAVAILABLE
    assert info.value.message == (
        f"the Docker engine at {engine.sock} answered GET /containers/{cid[:12]}/json with "
        "something that is not a container's inspection"
    )
