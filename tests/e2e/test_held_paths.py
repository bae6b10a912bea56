"""End to end (issue 45): host paths by identity, in the engine's view, and held, through the real
CLI, engine and registry (on both engines: scripts/test.sh runs this file again on the second).

- a link whose target the release's own ``up`` would make a moment later is refused
  (POLICY_DANGLING_LINK), and nothing is made or run;
- a link into /tmp (which the unit's PrivateTmp hides from the agent) is refused
  (POLICY_HIDDEN_PATH): here the agent and the engine see the same /tmp, the rule alone refuses;
- another app that binds the root writable through a link is a writer of that root, by
  identity (POLICY_SWAPPABLE_PATH);
- the race: another app (a real container) gets a writable bind over the allowed root after the
  apply; the next steady tick stops the service (POLICY_PATH_MOVED, reported) before any swap,
  and the swap it then makes while the container would restart reaches nothing of /etc; and a
  swap made while the release's container restarts (``docker events``: at its ``die``) is
  caught by the next steady tick, which stops the service."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-held-1") as lab:
        yield lab


def sees_etc(cid: str) -> bool:
    """Whether the container's /x shows the host's /etc (its os-release)."""
    got = subprocess.run(
        ("docker", "exec", cid, "ls", "/x"), capture_output=True, text=True, check=False
    )
    return "os-release" in got.stdout or "passwd" in got.stdout


def bound(lab: Lab, *volumes: str) -> dict[str, Any]:
    return lab.bundle(web={"volumes": list(volumes)})


def other_app(busybox: str, root: Path, command: str = "sleep 3600") -> str:
    """Another app's container (no project of the lab's) with ``root`` mounted writable."""
    name = f"other-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ("docker", "run", "-d", "--name", name, "--network", "none",
         "-v", f"{root}:/area", busybox, "sh", "-c", command),
        check=True, capture_output=True,
    )  # fmt: skip
    return name


def test_a_link_to_what_the_releases_own_up_makes_is_refused(lab: Lab) -> None:
    """``made`` is missing (compose's bind makes it at up) and ``l`` leads through it up and
    out to /etc: before, ``l`` was kept as written (its first part missing) and judged inside
    the root; now the dangling link is refused by its own code, and nothing is made."""
    made, link = lab.binds / "made", lab.binds / "l"
    os.symlink(f"{made}/../../../../etc", link)
    assert os.path.realpath(f"{made}/../../../../etc") == "/etc"
    lab.estate.tenancy.set_desired("r1", bound(lab, f"{made}:/m", f"{link}:/x"))
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["code"] == "POLICY_DANGLING_LINK", run.stdout
    assert f"the link {link} on its way leads to nothing" in run.errors[0]["detail"]
    assert lab.containers() == {} and not made.exists()
    assert not (lab.state_dir / "revisions" / "r1").exists()


def test_a_link_into_tmp_is_refused_as_hidden_from_the_agent(lab: Lab) -> None:
    hidden = Path(tempfile.mkdtemp(prefix="held-", dir="/tmp"))
    try:
        os.symlink(hidden, lab.binds / "t")
        lab.estate.tenancy.set_desired("r1", bound(lab, f"{lab.binds}/t:/x"))
        run = lab.tick()
        assert run.rc == 5, run.stdout + run.stderr
        assert run.summary["code"] == "POLICY_HIDDEN_PATH", run.stdout
        assert f"{lab.binds}/t (via /tmp) lies under /tmp" in run.errors[0]["detail"]
        assert lab.containers() == {}
    finally:
        shutil.rmtree(hidden)


def test_another_app_binding_the_root_through_a_link_is_a_writer(
    lab: Lab, busybox_image: str
) -> None:
    area = lab.binds / "area"
    (area / "x").mkdir(parents=True)
    alias = lab.binds / "alias"
    os.symlink(area, alias)  # the other app binds the root by another text
    other = other_app(busybox_image, alias)
    try:
        src = subprocess.run(
            ("docker", "inspect", "--format", "{{json .Mounts}}", other),
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert json.loads(src)[0]["Source"] == str(alias)  # the engine keeps the text
        lab.estate.tenancy.set_desired("r1", bound(lab, f"{area}/x:/x"))
        run = lab.tick()
        assert run.rc == 5, run.stdout + run.stderr
        assert run.summary["code"] == "POLICY_SWAPPABLE_PATH", run.stdout
        assert (
            f"{area}/x lies in {alias}, which container {other} can write"
            in (run.errors[0]["detail"])
        )
        assert lab.containers() == {}
    finally:
        subprocess.run(("docker", "rm", "-f", other), capture_output=True, check=False)


def status(lab: Lab) -> dict[str, Any]:
    proc = lab.cli("status", "--json")
    body: dict[str, Any] = json.loads(proc.stdout)
    return body


# web exits (1) when the test puts ``stop`` in its bind: its restart policy starts it again
EXITS = "while [ ! -e /x/stop ]; do sleep 0.2; done; rm -f /x/stop; exit 1"


def applied_with_held_bind(lab: Lab) -> Path:
    """r1 applied, web binding ``area/x`` (restart: always); its held record written."""
    area = lab.binds / "area"
    (area / "x").mkdir(parents=True)
    web = {"volumes": [f"{area}/x:/x"], "restart": "always", "command": ["sh", "-c", EXITS]}
    r1 = lab.bundle(web=web)
    lab.estate.tenancy.set_desired("r1", r1)
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    held = json.loads((lab.state_dir / "revisions" / "r1" / "paths.held.json").read_text())
    assert [h["real"] for h in held["held"]] == [str(area / "x")]
    steady = lab.tick()
    assert (steady.rc, steady.summary["outcome"]) == (0, "noop"), steady.stdout
    return area


def test_a_writer_appearing_over_a_held_path_stops_the_service_before_any_swap(
    lab: Lab, busybox_image: str
) -> None:
    area = applied_with_held_bind(lab)
    reports = len(lab.estate.tenancy.reports)
    other = other_app(busybox_image, area)
    try:
        run = lab.tick()  # the steady tick (304)
        assert run.rc == 1, run.stdout + run.stderr
        assert run.summary["code"] == "POLICY_PATH_MOVED", run.stdout
        assert f"container {other} can now write {area}" in run.errors[0]["detail"]
        assert lab.containers() == {} and lab.states("web") == ["exited"]
        [report] = lab.estate.tenancy.reports[reports:]
        assert (report["outcome"], report["code"]) == ("failed", "POLICY_PATH_MOVED")
        # the other app swaps the link and the engine is asked to start the container: a
        # stopped container is not started by its restart policy; the next tick keeps it so
        subprocess.run(
            ("docker", "exec", other, "sh", "-c", "mv /area/x /area/x.old; ln -s /etc /area/x"),
            check=True, capture_output=True,
        )  # fmt: skip
        again = lab.tick()
        assert (again.rc, again.summary["code"]) == (1, "POLICY_PATH_MOVED"), again.stdout
        assert lab.containers() == {} and lab.states("web") == ["exited"]
        assert not any(e.get("event") == "plan.restore" for e in again.lines)
        assert "/etc" not in [m["Source"] for m in lab.mounts()]
        body = status(lab)
        assert "POLICY_PATH_MOVED" in json.dumps(body), body
        doctor = lab.cli("doctor")
        [line] = [ln for ln in doctor.stdout.splitlines() if ln.startswith("FAIL policy:")]
        assert "a held host path of the running revision" in line, doctor.stdout
        assert f"{area}/x (volumes) leads to /etc now" in line, doctor.stdout
        # the writer gone and a directory made again (the old one kept: no inode reused):
        # another directory than the one held
        subprocess.run(("docker", "rm", "-f", other), check=True, capture_output=True)
        (area / "x").unlink()
        (area / "x").mkdir()
        still = lab.tick()
        assert (still.rc, still.summary["code"]) == (1, "POLICY_PATH_MOVED"), still.stdout
        assert "has another directory at" in still.errors[0]["detail"]
        # the operator checked it: --retry restores, judged anew and held as its up finds it
        back = lab.tick("--retry")
        assert (back.rc, back.summary["outcome"]) == (0, "applied"), back.stdout
        assert [m["Source"] for m in lab.mounts()] == [
            str(area / "x")
        ] and "web" in lab.containers()
        assert lab.tick().summary["outcome"] == "noop"
    finally:
        subprocess.run(("docker", "rm", "-f", other), capture_output=True, check=False)


def test_a_swap_while_the_container_restarts_is_stopped_by_the_next_steady_tick(
    lab: Lab, busybox_image: str
) -> None:
    """The race: another app with a writable bind over the root swaps ``x`` for a link to
    /etc at the moment the release's container dies (``docker events``), as its restart
    policy starts it again (which of the two the engine does first is the race's: the engine
    may mount /etc, no agent between its ticks can stop that); the next steady tick stops it
    (POLICY_PATH_MOVED, reported) and keeps it stopped."""
    area = applied_with_held_bind(lab)
    other = other_app(busybox_image, area)
    web = lab.containers()["web"]
    since, until = f"{time.time():.3f}", f"{time.time() + 120:.3f}"  # the stream ends then
    events = subprocess.Popen(
        ("docker", "events", "--since", since, "--until", until, "--filter", f"container={web}",
         "--filter", "event=die", "--filter", "event=start", "--format", "{{json .}}"),
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert events.stdout is not None
        (area / "x" / "stop").touch()  # web exits 1: the engine starts it again
        seen = []
        for line in events.stdout:
            seen.append(json.loads(line)["status"])
            if seen[-1] == "die" and len(seen) == 1:  # died: the engine restarts it next
                subprocess.run(
                    ("docker", "exec", other, "sh", "-c", "rm -rf /area/x; ln -s /etc /area/x"),
                    check=True, capture_output=True,
                )  # fmt: skip
            if seen[-1] == "start":
                break
        assert seen[:1] == ["die"] and seen[-1] == "start", seen
    finally:
        events.kill()
        events.wait(timeout=30)
    try:
        run = lab.tick()  # steady: 304, the same revision
        assert run.rc == 1, run.stdout + run.stderr
        assert run.summary["code"] == "POLICY_PATH_MOVED", run.stdout
        detail = run.errors[0]["detail"]
        assert f"{area}/x (volumes)" in detail and "/etc" in detail, detail
        assert lab.containers() == {}
        assert lab.estate.tenancy.reports[-1]["code"] == "POLICY_PATH_MOVED"
    finally:
        subprocess.run(("docker", "rm", "-f", other), capture_output=True, check=False)
