"""Update windows and the rollout spread with the real CLI, the loopback estate, a real registry
and the real Docker engine: what waits, what the check-in tells tenancy (contract v1.2), what
status and plan say, what still happens meanwhile (a restore), and what makes it apply."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from monky_deployd.core.lifecycle import schedule
from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, Run

pytestmark = pytest.mark.docker

ENV = "env-e2e-01"  # the lab's environment: the box's identity for its rollout place
DAY = 86400


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pace-pw") as lab:
        yield lab


def revision(prefix: str, *, canary: bool) -> str:
    """A revision name whose rollout place for this box is a canary's (< 2 %) or late (> 50 %)."""
    for i in range(10_000):
        rev = f"{prefix}-{i}"
        place = schedule.place(ENV, rev)
        if (place < schedule.CANARY_FRACTION) if canary else (place > 0.5):
            return rev
    raise AssertionError("no such revision name")


def status(lab: Lab) -> tuple[int, dict[str, Any]]:
    proc = lab.cli("status", "--json")
    return proc.returncode, json.loads(proc.stdout)


def plan(lab: Lab) -> tuple[int, dict[str, Any]]:
    proc = lab.cli("plan", "--json")
    return proc.returncode, json.loads(proc.stdout)


def waited(run: Run, code: str) -> dict[str, Any]:
    assert run.rc == 7, run.stdout + run.stderr
    assert (run.summary["outcome"], run.summary["code"]) == ("waiting", code)
    assert run.summary["level"] == "INFO" and not run.errors
    [line] = run.events("plan.waiting")
    return line


def test_rollout_spread_waits_for_the_box_place_then_applies(lab: Lab) -> None:
    tenancy = lab.estate.tenancy
    tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    first_r1 = lab.labelled("r1")
    pulls, reports = lab.pulls(), len(tenancy.reports)

    late = revision("r2", canary=False)
    tenancy.set_desired(
        late, lab.bundle(env_template="DB_PASSWORD=${DB_PASSWORD}\nX=2\n"), spread_s=DAY
    )
    before = time.time()
    line = waited(lab.tick(), "ROLLOUT_WAIT")
    offset = schedule.offset(ENV, late, DAY)
    assert line["why"] == "rollout" and line["canary"] is False
    assert line["rollout_offset_s"] == round(offset)
    until = datetime.fromisoformat(line["until"].replace("Z", "+00:00")).timestamp()
    assert before + offset - 2 <= until <= time.time() + offset + 2
    # nothing changed on the box, nothing was pulled or reported
    assert lab.labelled("r1") == first_r1 and lab.pulls() == pulls
    assert len(tenancy.reports) == reports
    assert tenancy.waiting[-1] is None  # it checked in before it decided to wait

    # the next tick tells tenancy (contract v1.2), and waits again for the same place
    again = waited(lab.tick(), "ROLLOUT_WAIT")
    assert again["until"] == line["until"]
    assert tenancy.waiting[-1] == {"revision": late, "until": line["until"], "why": "rollout"}
    assert tenancy.checkins[-1]["applied"] == {"revision": "r1", "outcome": "waiting"}

    rc, body = status(lab)
    assert (rc, body["state"]) == (11, "waiting")
    assert body["waiting"]["revision"] == late and body["waiting"]["until"] == line["until"]
    assert body["waiting"]["rollout_offset_s"] == round(offset)
    assert body["waiting"]["spread_s"] == DAY and body["waiting"]["why"] == "rollout"
    assert "new revision" in lab.cli("status").stdout
    rc, found = plan(lab)
    assert rc == 1 and found["plan"] == "waiting", found  # the changes it would make, later
    assert any(f"applies {late} at {line['until']}" in n for n in found["notes"])

    # a newer revision restarts the wait from its own first sight; this box is its canary
    canary = revision("r3", canary=True)
    tenancy.set_desired(
        canary, lab.bundle(env_template="DB_PASSWORD=${DB_PASSWORD}\nX=3\n"), spread_s=DAY
    )
    seen_late = json.loads((lab.state_dir / "waiting.json").read_text())["first_seen_at"]
    line3 = waited(lab.tick(), "ROLLOUT_WAIT")
    record = json.loads((lab.state_dir / "waiting.json").read_text())
    assert record["revision"] == canary and record["first_seen_at"] > seen_late
    assert line3["canary"] is True and "(canary)" in line3["message"]
    assert status(lab)[1]["waiting"]["canary"] is True

    # its place has come (the record says it was first seen a spread ago): applied
    record["first_seen_at"] = time.time() - DAY
    (lab.state_dir / "waiting.json").write_text(json.dumps(record))
    run = lab.tick()
    assert run.rc == 0 and run.summary["outcome"] == "applied", run.stdout
    assert "canary" in run.events("plan.apply")[0]["message"]
    assert set(lab.labelled(canary)) == {"web"} and lab.pulls() > pulls
    assert tenancy.reports[-1]["revision"] == canary
    # applied: the next check-in says so, and the record is gone
    assert lab.tick().rc == 0
    assert tenancy.waiting[-1] is None
    assert tenancy.checkins[-1]["applied"] == {"revision": canary, "outcome": "applied"}
    assert not (lab.state_dir / "waiting.json").exists()


def closed_window(hours_ahead: int = 3) -> tuple[str, float]:
    """A daily one-hour UTC window that opens ``hours_ahead`` hours from now (closed now), and
    its next opening."""
    opens = (int(time.time()) // 60 + 1) * 60 + hours_ahead * 3600
    at = datetime.fromtimestamp(opens, UTC)
    return f"* {at:%H:%M} for 1h UTC", float(opens)


def open_window() -> str:
    at = datetime.fromtimestamp(time.time() - 600, UTC)
    return f"* {at:%H:%M} for 2h UTC"


def test_update_window_holds_a_new_revision_restores_meanwhile_and_retry_applies_now(
    lab: Lab,
) -> None:
    tenancy = lab.estate.tenancy
    window, opens = closed_window()
    lab.write_config(update_windows=[window])
    tenancy.set_desired("r1", lab.bundle())
    run = lab.tick()
    assert run.rc == 0, run.stdout  # a first apply: nothing runs that a window protects
    pulls = lab.pulls()

    tenancy.set_desired("r2", lab.bundle(env_template="DB_PASSWORD=${DB_PASSWORD}\nX=2\n"))
    line = waited(lab.tick(), "WINDOW_CLOSED")
    until = datetime.fromtimestamp(opens, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert line["why"] == "window" and line["until"] == until == line["next_window_at"]
    assert f"next opens at {until}" in line["message"]
    assert set(lab.labelled("r1")) == {"web"} and lab.pulls() == pulls

    rc, body = status(lab)
    assert (rc, body["state"]) == (11, "waiting")
    assert body["windows"] == {
        "configured": [window],
        "open": False,
        "closes_at": None,
        "opens_at": until,
    }
    assert f"closed, opens {until}" in lab.cli("status").stdout
    rc, found = plan(lab)
    assert rc == 1 and found["plan"] == "waiting"
    assert any(
        n.startswith(f"update windows: closed; {window} opens at {until}") for n in found["notes"]
    )

    # drift of the applied revision is restored outside the window (no pull); r2 still waits
    pulls = lab.pulls()  # (plan asked the registry for the images' digests)
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), capture_output=True, check=True)
    run = lab.tick()
    assert run.rc == 0 and run.summary["outcome"] == "applied", run.stdout
    assert "restoring r1" in run.events("plan.restore")[0]["message"]
    assert set(lab.labelled("r1")) == {"web"} and lab.pulls() == pulls
    assert tenancy.waiting[-1] == {"revision": "r2", "until": until, "why": "window"}
    assert waited(lab.tick(), "WINDOW_CLOSED")["until"] == until

    # the metrics show the window and the wait
    lab.write_config(update_windows=[window], metrics={"textfile_dir": str(lab.tmp)})
    waited(lab.tick(), "WINDOW_CLOSED")
    prom = {
        name: float(value)
        for name, _, value in (
            ln.rpartition(" ")
            for ln in (lab.tmp / "monky-deployd.prom").read_text().splitlines()
            if ln and not ln.startswith("#")
        )
    }
    assert prom["monky_deployd_update_window_open"] == 0
    assert prom["monky_deployd_update_window_next_open_timestamp_seconds"] == opens
    assert prom['monky_deployd_waiting_until_timestamp_seconds{why="window"}'] == opens

    # inside a window it is applied
    lab.write_config(update_windows=[open_window()])
    run = lab.tick()
    assert run.rc == 0 and run.summary["outcome"] == "applied", run.stdout
    assert set(lab.labelled("r2")) == {"web"}

    # closed again: `apply --once --retry` applies now, by hand
    lab.write_config(update_windows=[window])
    tenancy.set_desired("r3", lab.bundle(env_template="DB_PASSWORD=${DB_PASSWORD}\nX=3\n"))
    waited(lab.tick(), "WINDOW_CLOSED")
    run = lab.tick("--retry")
    assert run.rc == 0 and run.summary["outcome"] == "applied", run.stdout
    assert set(lab.labelled("r3")) == {"web"}
