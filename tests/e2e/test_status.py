"""`monky-deployd status --json` for each state of a box: the real CLI, the loopback estate, a
real registry and the real Docker engine. Each call is checked against the documented schema and
exit status, and proven to change nothing: the state dir is byte-identical (names, bytes, modes)
before and after, and tenancy and OpenBao see no request."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker

TOP_KEYS = {
    "schema", "state", "exit_status", "reason", "now", "ledger", "revisions", "held", "last_tick",
    "last_success_at", "counters", "token", "leases_last_hour", "suspended", "locks", "locked",
    "interrupted", "services", "health", "timer", "history", "windows", "waiting", "set_aside",
    "strays", "trust",
}  # fmt: skip


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, busybox_image: str) -> Iterator[Lab]:
    image = registry.push(busybox_image, "env-e2e-01/web", "status")
    with Lab(tmp_path, registry, image, db_password="status-pw") as lab:
        lab.write_config(locks={"dir": str(tmp_path / "locks")})
        yield lab


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    out: dict[str, tuple[int, bytes]] = {}
    for dirpath, _, files in os.walk(root):
        out[dirpath] = (os.stat(dirpath).st_mode, b"")
        for name in files:
            path = Path(dirpath) / name
            out[str(path)] = (path.stat().st_mode, path.read_bytes())
    return out


def status(lab: Lab, expect_rc: int, state: str) -> dict[str, Any]:
    """`status --json`, proven read-only; its body after the schema and exit-status checks."""
    before = snapshot(lab.state_dir) if lab.state_dir.exists() else {}
    seen = (len(lab.estate.tenancy.requests), len(lab.estate.bao.requests))
    proc = lab.cli("status", "--json")
    assert (snapshot(lab.state_dir) if lab.state_dir.exists() else {}) == before
    assert (len(lab.estate.tenancy.requests), len(lab.estate.bao.requests)) == seen
    body: dict[str, Any] = json.loads(proc.stdout)
    assert set(body) == TOP_KEYS and body["schema"] == 1, proc.stderr
    assert (proc.returncode, body["exit_status"], body["state"]) == (expect_rc, expect_rc, state)
    assert body["timer"]["next_run_at"] is None  # no systemd here
    assert body["timer"]["state"] is None and body["timer"]["last_tick_failed"] is None
    text = lab.cli("status")
    assert text.returncode == expect_rc and f"{state} (exit {expect_rc})" in text.stdout
    stored = lab.state_dir / "token.json"
    if stored.exists():  # the bookkeeping is shown, never the token
        secret = json.loads(stored.read_text())["token"]["token"]
        assert secret not in proc.stdout + proc.stderr + text.stdout + text.stderr
    return body


def crashing(lab: Lab) -> dict[str, Any]:
    b = lab.bundle()
    doc = yaml.safe_load(b["compose"])
    doc["services"]["web"]["command"] = ["sh", "-c", "sleep 1; exit 1"]
    b["compose"] = yaml.safe_dump(doc)
    return b


def test_status_for_each_state_of_a_box_changes_nothing(lab: Lab) -> None:
    fresh = status(lab, 8, "no_tick")
    assert fresh["last_tick"] is None and fresh["token"] is None and fresh["history"] == []

    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    ok = status(lab, 0, "ok")
    assert ok["revisions"]["applied"] == ok["revisions"]["desired"] == "r1"
    assert ok["revisions"]["last_known_good"] == "r1"
    assert {"kind": "REVISION", "detail": "(none) -> r1"} in ok["revisions"]["reasons"]
    assert ok["revisions"]["deploy_id"] == ok["last_tick"]["tick_id"]
    assert ok["last_tick"]["outcome"] == "applied" and ok["counters"]["ticks"]["applied"] == 1
    assert ok["token"]["kind"] == "lease" and ok["leases_last_hour"] == 1
    [web] = ok["services"]["containers"]
    assert ok["services"]["engine"] == "ok" and web["service"] == "web"
    assert web["state"] == "running" and web["digest"].startswith(lab.registry.host)
    assert [h["outcome"] for h in ok["history"]] == ["applied"]

    assert lab.tick().rc == 0  # a no-op: not history
    assert status(lab, 0, "ok")["counters"]["ticks"]["noop"] == 1

    assert lab.cli("suspend", "--reason", "db migration").returncode == 0
    lab.estate.tenancy.set_desired("r2", lab.bundle(env_template="DB_PASSWORD=${DB_PASSWORD}\n"))
    assert lab.tick().rc == 6
    paused = status(lab, 9, "paused")
    assert paused["suspended"]["reason"] == "db migration"
    assert paused["revisions"]["desired"] == "r2"
    assert lab.cli("resume").returncode == 0

    assert lab.cli("lock", "take", "freeze", "--reason", "month end").returncode == 0
    assert lab.tick().rc == 6
    locked = status(lab, 9, "paused")
    assert locked["locked"] is True and locked["last_tick"]["code"] == "UPDATE_LOCKED"
    assert lab.cli("lock", "release", "freeze").returncode == 0

    lab.estate.tenancy.set_desired("r3", crashing(lab))
    assert lab.tick().rc == 1
    rolled = status(lab, 6, "held")
    assert rolled["held"]["revision"] == "r3" and rolled["held"]["rolled_back_to"] == "r1"
    assert rolled["revisions"]["applied"] == "r1" and rolled["counters"]["rollbacks"] == 1
    assert rolled["history"][0]["rollback_to"] == "r1"
    assert lab.tick().rc == 6  # held: skipped
    assert status(lab, 6, "held")["last_tick"]["code"] == "REVISION_HELD"

    lab.estate.tenancy.fail_next(503, b"down for maintenance", path_contains="checkin")
    run = lab.tick()
    assert run.rc == 1, run.stdout
    failed = status(lab, 1, "failed")
    assert failed["counters"]["consecutive_failures"] == 2  # the rollback tick, this one
    assert failed["last_tick"]["code"] == run.errors[0]["code"]

    token = lab.state_dir / "token.json"
    doc = json.loads(token.read_text())
    doc["token"]["expires_at"] = 1.0
    token.write_text(json.dumps(doc))
    expired = status(lab, 1, "failed")
    assert expired["token"]["expires_in_s"] < 0 and expired["token"]["expires_at"].startswith(
        "1970"
    )


def test_status_says_the_engine_is_unreachable_instead_of_crashing(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    lab.write_config(docker={"host": f"unix://{lab.tmp / 'no-such.sock'}"})
    body = status(lab, 0, "ok")
    assert body["services"]["engine"].startswith("unreachable: DOCKER_UNAVAILABLE")
    assert body["services"]["containers"] == []
