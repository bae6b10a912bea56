"""The verify phase's polling loop against real containers, with its clock and sleep injected:
a movable clock that only the loop's own sleeps advance, so a 10-minute window or a 3-minute
deadline is judged in a few real seconds, and the count of polls is exact."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd import config as config_mod
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent.apply import steps
from monky_deployd.agent.context import Context
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle.boxsteps import Verify
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.dockerlab import remove_containers
from monky_deployd_testkit.fakes.clock import Clock

pytestmark = pytest.mark.docker


@pytest.fixture
def project() -> Iterator[str]:
    name = "vfy" + uuid.uuid4().hex[:8]
    yield name
    remove_containers(name)


def start(project: str, busybox_image: str, *extra: str) -> None:
    subprocess.run(
        (
            "docker", "run", "-d", "--network", "none",
            "--label", f"com.docker.compose.project={project}",
            "--label", "com.docker.compose.service=web",
            *extra, busybox_image, "sleep", "3600",
        ),
        check=True,
        capture_output=True,
    )  # fmt: skip


def context(tmp_path: Path, clock: Clock, sleeps: list[float], **verify: float) -> Context:
    raw: dict[str, object] = {"env": "env-vfy-01", "verify": verify}
    if os.environ.get("DOCKER_HOST"):  # the suite's second engine (monky_deployd_testkit.engines)
        raw["docker"] = {"host": os.environ["DOCKER_HOST"]}
    cfg = config_mod.parse(raw, "test")
    state = StateDir(tmp_path / "state").ensure()

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)

    rec = TickRecord(tick_id="t", started_at=0.0)
    return Context(cfg, state, rec, clock.now, watch_clock=clock.now, sleep=sleep)


def test_a_steady_container_passes_after_exactly_the_window(
    tmp_path: Path, project: str, busybox_image: str
) -> None:
    start(project, busybox_image)
    sleeps: list[float] = []
    ctx = context(tmp_path, Clock(0.0), sleeps, stable_s=600, deadline_s=900, poll_s=5)
    steps.verify(ctx, Verify(project, "r1", ("web",)))
    assert sleeps == [5.0] * 120
    assert ctx.rec.services[0]["name"] == "web" and ctx.rec.services[0]["state"] == "running"


def test_a_healthcheck_still_starting_at_the_deadline_fails_unhealthy(
    tmp_path: Path, project: str, busybox_image: str
) -> None:
    start(
        project,
        busybox_image,
        "--health-cmd", "exit 1", "--health-interval", "1h", "--health-start-period", "1h",
    )  # fmt: skip
    sleeps: list[float] = []
    ctx = context(tmp_path, Clock(0.0), sleeps, stable_s=30, deadline_s=180, poll_s=5)
    with pytest.raises(DeployError) as info:
        steps.verify(ctx, Verify(project, "r1", ("web",)))
    assert info.value.code is Code.VERIFY_UNHEALTHY
    assert "web" in info.value.message and "180 s" in info.value.message
    assert len(sleeps) == 36


def test_one_replica_that_exits_fails_the_verify_however_many_others_run(
    tmp_path: Path, project: str, busybox_image: str
) -> None:
    """scale: 3 of web, the first replica gone with exit 3: not hidden behind the two that
    started after it (judging only the newest start of a service would pass this)."""
    subprocess.run(
        (
            "docker", "run", "-d", "--network", "none",
            "--label", f"com.docker.compose.project={project}",
            "--label", "com.docker.compose.service=web",
            busybox_image, "sh", "-c", "exit 3",
        ),
        check=True,
        capture_output=True,
    )  # fmt: skip
    start(project, busybox_image)
    start(project, busybox_image)
    ctx = context(tmp_path, Clock(0.0), [], stable_s=30, deadline_s=60, poll_s=5)
    with pytest.raises(DeployError) as caught:
        steps.verify(ctx, Verify(project, "r1", ("web",)))
    assert caught.value.code is Code.VERIFY_EXITED
    assert "exit_code=3" in (caught.value.detail or "")


def test_an_exited_one_off_run_container_is_not_a_replica(
    tmp_path: Path, project: str, busybox_image: str
) -> None:
    """An operator's `docker compose run web ...` without --rm that exited 1 stays in the
    project's container list: it is not judged (compose labels it oneoff=True)."""
    start(project, busybox_image, "--label", "com.docker.compose.oneoff=False")
    subprocess.run(
        (
            "docker", "run", "-d", "--network", "none",
            "--label", f"com.docker.compose.project={project}",
            "--label", "com.docker.compose.service=web",
            "--label", "com.docker.compose.oneoff=True",
            busybox_image, "sh", "-c", "exit 1",
        ),
        check=True,
        capture_output=True,
    )  # fmt: skip
    sleeps: list[float] = []
    ctx = context(tmp_path, Clock(0.0), sleeps, stable_s=30, deadline_s=60, poll_s=5)
    steps.verify(ctx, Verify(project, "r1", ("web",)))
    assert sum(sleeps) == 30.0
