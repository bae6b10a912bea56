"""Every service's answer is bounded in size and in time, the same way: tenancy, OpenBao and the
Docker Engine API, each against a real loopback server that sends a body without end or drips
its answer a byte at a time. Counts, not durations: the named code, and that the server saw the
connection closed after a bounded number of bytes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters import deadline
from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.adapters.httpio import PoolTransport
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.config import DockerCfg, OpenBaoCfg, TenancyCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline
from monky_deployd_testkit.fakes.estate import Estate
from monky_deployd_testkit.fakes.http import LoopbackServer, Request, Response, json_response

ENV = "env-bounds-01"
# What the kernel's socket buffers on loopback can hold beyond what the client read.
SOCKET_SLACK = 32 * 1024 * 1024


class FakeEngine(LoopbackServer):
    """The Engine API's container list, over TCP (docker.host: tcp://)."""

    def __init__(self) -> None:
        super().__init__()
        self.lists = 0

    def route(self, req: Request) -> Response:
        with self.lock:
            self.lists += 1
        return json_response(200, [])


@pytest.fixture(scope="module")
def estate() -> Iterator[Estate]:
    with Estate(env=ENV) as est:
        yield est


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngine]:
    with FakeEngine() as eng:
        yield eng


def client() -> httpx.Client:
    return httpx.Client(transport=PoolTransport(), trust_env=False, timeout=10)


def ask_tenancy(estate: Estate, cap: int, deadline_s: float) -> Callable[[], object]:
    cfg = TenancyCfg(host=estate.tenancy.host, port=estate.tenancy.port, deadline_s=deadline_s)

    def call() -> object:
        with client() as http:
            return Tenancy(http, cfg, ENV, max_body_bytes=cap).checkin("t", {}, None)

    return call


def ask_openbao(estate: Estate, cap: int, deadline_s: float) -> Callable[[], object]:
    cfg = OpenBaoCfg(
        host=estate.bao.host, port=estate.bao.port, max_body_bytes=cap, deadline_s=deadline_s
    )

    def call() -> object:
        with client() as http:
            return Bao(http, cfg).login_jwt(estate.grant)

    return call


def ask_engine(engine: FakeEngine, cap: int, deadline_s: float) -> Callable[[], object]:
    cfg = DockerCfg(
        host=f"tcp://{engine.host}:{engine.port}",
        api_max_body_bytes=cap,
        command_timeout_s=deadline_s,
    )
    return lambda: docker_api.project_containers(cfg, "shop")


SERVICES = ("tenancy", "openbao", "engine")
TOO_LARGE = {
    "tenancy": Code.TENANCY_RESPONSE_TOO_LARGE,
    "openbao": Code.OPENBAO_RESPONSE_TOO_LARGE,
    "engine": Code.DOCKER_RESPONSE_TOO_LARGE,
}
TOO_SLOW = {
    "tenancy": Code.TENANCY_TIMEOUT,
    "openbao": Code.OPENBAO_UNREACHABLE,
    "engine": Code.DOCKER_UNAVAILABLE,
}


def setup(
    which: str, estate: Estate, engine: FakeEngine, cap: int, deadline_s: float
) -> tuple[LoopbackServer, Callable[[], object]]:
    if which == "tenancy":
        return estate.tenancy, ask_tenancy(estate, cap, deadline_s)
    if which == "openbao":
        return estate.bao, ask_openbao(estate, cap, deadline_s)
    return engine, ask_engine(engine, cap, deadline_s)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(which=st.sampled_from(SERVICES), cap=st.integers(1024, 2 * 1024 * 1024))
def test_a_body_without_end_is_refused_at_the_cap_and_the_connection_closed(
    estate: Estate, engine: FakeEngine, which: str, cap: int
) -> None:
    server, call = setup(which, estate, engine, cap, 60)
    cut_before, sent_before = server.cut, server.bytes_dripped
    server.endless = True
    try:
        with pytest.raises(DeployError) as info:
            call()
        assert server.wait_cut(cut_before + 1)
    finally:
        server.clear_faults()
    assert info.value.code is TOO_LARGE[which]
    assert "refused unread" in info.value.message
    # the agent stopped reading at the cap: what went out is the cap plus socket buffers
    assert server.bytes_dripped - sent_before < cap + SOCKET_SLACK


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(which=st.sampled_from(SERVICES), cap=st.integers(1024, 64 * 1024))
def test_a_declared_length_over_the_cap_is_refused_before_the_body(
    estate: Estate, engine: FakeEngine, which: str, cap: int
) -> None:
    server, call = setup(which, estate, engine, cap, 60)
    server.fail_next(200, b"[" + b"0," * cap + b"0]")
    try:
        with pytest.raises(DeployError) as info:
            call()
    finally:
        server.clear_faults()
    assert info.value.code is TOO_LARGE[which]


@pytest.mark.parametrize("which", SERVICES)
def test_a_dripping_answer_is_cut_off_at_the_request_deadline(
    estate: Estate, engine: FakeEngine, which: str
) -> None:
    server, call = setup(which, estate, engine, 1024 * 1024, 1.0)
    cut_before = server.cut
    server.drip_s = 0.1  # every byte arrives well within any per-read timeout
    try:
        with pytest.raises(DeployError) as info:
            call()
        assert server.wait_cut(cut_before + 1)
    finally:
        server.clear_faults()
    assert info.value.code is TOO_SLOW[which]
    assert ("within its deadline of 1 s" if which != "engine" else "within 1 s") in (
        info.value.message
    )


@pytest.mark.parametrize("which", SERVICES)
def test_the_tick_deadline_cuts_a_request_short_with_its_own_code(
    estate: Estate, engine: FakeEngine, which: str
) -> None:
    server, call = setup(which, estate, engine, 1024 * 1024, 60)
    cut_before = server.cut
    server.drip_s = 0.1
    try:
        with deadline.tick(1.0), pytest.raises(TickDeadline) as info:
            try:
                call()
            except DeployError:  # what an ordinary handler catches: not the tick's deadline
                pytest.fail("the tick's deadline was caught as a DeployError")
        assert server.wait_cut(cut_before + 1)
    finally:
        server.clear_faults()
    assert info.value.fault.code is Code.TICK_DEADLINE
    assert "tick_deadline_s" in info.value.fault.message


def test_answers_within_bounds_still_arrive(estate: Estate, engine: FakeEngine) -> None:
    assert ask_openbao(estate, 64 * 1024, 5)() is not None
    assert ask_engine(engine, 64 * 1024, 5)() == []
