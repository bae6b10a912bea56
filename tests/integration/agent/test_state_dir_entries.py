"""What is planted in the outbox and the lock dir, and the numbers an operator types: whole
in-process ticks and CLI runs against the loopback fakes (no Docker)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd import cli
from monky_deployd import config as config_mod
from monky_deployd.adapters.box.state.state import OUTBOX_MAX, StateDir
from monky_deployd.agent.commands import status
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.core.records.suspend import Suspended
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.fakes.estate import Estate

ENV = "env-entries-01"
SECRET = "registry-login-c2VjcmV0Cg"


@pytest.fixture
def estate() -> Iterator[Estate[Any]]:
    with Estate(env=ENV) as est:
        yield est


def setup(estate: Estate[Any], tmp_path: Path) -> tuple[config_mod.Config, Path]:
    raw = estate.config(
        state_dir=tmp_path / "state", grant_file=estate.write_grant(tmp_path / "grant.jwt")
    )
    raw["locks"] = {"dir": str(tmp_path / "locks")}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(raw, default=str))))
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "outbox").mkdir(mode=0o700)
    (tmp_path / "locks").mkdir()
    return config_mod.parse(raw, "test"), path


def tick(estate: Estate[Any], cfg: config_mod.Config) -> TickRecord:
    return run_tick(cfg, clock=estate.clock.now, wire=estate.wire())


def report(tick_id: str) -> bytes:
    return json.dumps({"tick_id": tick_id, "outcome": "failed", "code": "BUNDLE_INVALID"}).encode()


def test_an_outbox_link_or_directory_is_set_aside_never_posted(
    estate: Estate[Any], tmp_path: Path
) -> None:
    """Today: a link to docker/config.json was posted to tenancy as a report; a directory ended
    every tick INTERNAL."""
    cfg, _ = setup(estate, tmp_path)
    login = tmp_path / "state" / "docker" / "config.json"
    login.parent.mkdir(mode=0o700)
    login.write_text(json.dumps({"auths": {"reg": {"auth": SECRET}}}))
    outbox = tmp_path / "state" / "outbox"
    (outbox / "000000000000001-t1.json").symlink_to(login)
    (outbox / "000000000000002-t2.json").mkdir()
    (outbox / "000000000000003-t3.json").write_bytes(report("t3"))
    first = tick(estate, cfg)
    assert (first.outcome, first.code) == ("idle", "OK"), first.message
    assert [r["tick_id"] for r in estate.tenancy.reports] == ["t3"]
    assert SECRET not in json.dumps(estate.tenancy.reports)
    assert os.listdir(outbox) == []
    assert len(os.listdir(tmp_path / "state" / "aside")) == 2
    assert login.read_text().count(SECRET) == 1, "the link's target is untouched"
    assert tick(estate, cfg).code == "OK"


def test_a_report_refused_with_a_4xx_is_dropped_and_the_rest_go_out(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Today: retried every tick, blocking every report behind it."""
    cfg, _ = setup(estate, tmp_path)
    state = StateDir(tmp_path / "state")
    state.outbox_put("t-refused", report("t-refused"))
    state.outbox_put("t-next", report("t-next"))
    estate.tenancy.fail_next(422, b'{"error": {"code": "X", "message": "no"}}', "reports")
    with caplog.at_level(logging.INFO, logger="monky_deployd"):
        assert tick(estate, cfg).code == "OK"
    assert [r["tick_id"] for r in estate.tenancy.reports] == ["t-next"]
    assert state.outbox() == []
    dropped = [r for r in caplog.records if getattr(r, "event", "") == "outbox.dropped"]
    assert len(dropped) == 1 and "t-refused" in dropped[0].getMessage()


@pytest.mark.parametrize("answer", [429, 503])
def test_a_report_refused_for_now_is_kept_in_order(
    answer: int, estate: Estate[Any], tmp_path: Path
) -> None:
    cfg, _ = setup(estate, tmp_path)
    state = StateDir(tmp_path / "state")
    state.outbox_put("t-a", report("t-a"))
    state.outbox_put("t-b", report("t-b"))
    estate.tenancy.fail_next(answer, b"", "reports")
    tick(estate, cfg)
    assert [p.name.split("-", 1)[1] for p in state.outbox()] == ["t-a.json", "t-b.json"]
    tick(estate, cfg)
    assert [r["tick_id"] for r in estate.tenancy.reports] == ["t-a", "t-b"]


def test_after_a_clock_step_back_the_oldest_report_is_dropped_not_the_newest(
    estate: Estate[Any], tmp_path: Path
) -> None:
    cfg, _ = setup(estate, tmp_path)
    state = StateDir(tmp_path / "state")
    for i in range(OUTBOX_MAX):
        state.outbox_put(f"t{i}", report(f"t{i}"))
    estate.tenancy.set_desired("r1", {"project": "shop", "compose": ""})
    estate.tenancy.fail_next(503, b"", "reports", times=2)  # the outbox's first, the tick's own
    month = 30 * 86400.0  # the box's clock stepped back a month
    rec = run_tick(cfg, clock=lambda: estate.clock.now() - month, wire=estate.wire())
    assert rec.code == "BUNDLE_INVALID"
    kept = [p.name.split("-", 1)[1] for p in state.outbox()]
    assert len(kept) == OUTBOX_MAX and kept[-1] == f"{rec.tick_id}.json"
    assert "t0.json" not in kept and kept[0] == "t1.json"


def test_many_locks_are_one_journal_line_and_the_names_are_printable(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Today: 50,000 lock files gave 50,000 journal lines per tick, names printed raw."""
    cfg, _ = setup(estate, tmp_path)
    locks = tmp_path / "locks"
    for i in range(2000):
        (locks / f"l{i:04d}.lock").write_bytes(b"")
    old = estate.clock.now() - 7200
    for i in range(1000):
        os.utime(locks / f"l{i:04d}.lock", (old, old))
    (locks / "evil\x1b[2J.lock").write_text("\x1b]0;title\x07")
    os.mkfifo(locks / "fifo.lock")
    with caplog.at_level(logging.INFO, logger="monky_deployd"):
        assert tick(estate, cfg).code == "OK"
    events = [getattr(r, "event", "") for r in caplog.records]
    assert events.count("lock.held") == 1 and events.count("lock.stale") == 1
    assert events.count("lock.ignored") == 1
    text = "".join(r.getMessage() for r in caplog.records)
    assert "\x1b" not in text and "and 996 more" in text and "fifo.lock (a FIFO)" in text
    body = status.view(cfg, engine=False)
    assert len(body["locks"]) == 2001 and "\x1b" not in json.dumps(body, ensure_ascii=False)


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = cli.main(list(argv))
    finally:
        root.handlers[:], root.level = handlers, level
    return rc, out.getvalue()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("lock", "take", "op", "--ttl", "9" * 400), "longer than a year"),
        (("lock", "take", "op", "--ttl", "8d"), "longer than locks.max_ttl_s (604800 s)"),
        (("suspend", "--for", "99999999999d"), "longer than a year"),
    ],
)
def test_a_huge_duration_is_refused_before_anything_is_written(
    argv: tuple[str, ...], said: str, estate: Estate[Any], tmp_path: Path
) -> None:
    """Today: `lock take --ttl` with 400 nines wrote Infinity; `suspend --for` a huge value
    wrote the file, then every tick ended INTERNAL and status crashed."""
    cfg, path = setup(estate, tmp_path)
    rc, out = run_cli(*argv, "--config", str(path))
    assert rc == 2 and said in out, out
    assert (
        os.listdir(tmp_path / "locks") == [] and not cfg.state_dir.joinpath("suspend.json").exists()
    )


@pytest.mark.parametrize("until", [1e300, float("inf")])
def test_a_planted_suspend_with_a_time_past_the_calendar_never_crashes(
    until: float, estate: Estate[Any], tmp_path: Path
) -> None:
    cfg, path = setup(estate, tmp_path)
    StateDir(cfg.state_dir).write_suspend(Suspended(estate.clock.now(), until, "planted"))
    rec = tick(estate, cfg)
    assert rec.code == "OK" or rec.code == "SUSPENDED", rec.message
    _, out = run_cli("status", "--config", str(path))
    assert "Traceback" not in out and "9999-12-31T23:59:59Z" in out
    _, out = run_cli("status", "--json", "--config", str(path))
    assert json.loads(out)["suspended"]["until"] == "9999-12-31T23:59:59Z"


def test_status_says_what_is_not_a_record_and_what_was_set_aside_a_link_as_a_fifo(
    estate: Estate[Any], tmp_path: Path
) -> None:
    """Issue 26: before a tick, status read a link (or a FIFO) at held.json as no hold and said
    nothing; after it, aside/'s entries were names without what they were. Now a link and a
    FIFO are said the same way, before the tick (``strays``) and after it (``set_aside``)."""
    cfg, path = setup(estate, tmp_path)
    shadow = tmp_path / "shadow"
    shadow.write_text("root:$6$precious\n")
    state = tmp_path / "state"
    (state / "held.json").symlink_to(shadow)
    os.mkfifo(state / "bake.json")
    (state / "revisions" / "r1").mkdir(parents=True)
    (state / "revisions" / "r1" / ".env").symlink_to(shadow)

    _, out = run_cli("status", "--json", "--config", str(path))
    before = json.loads(out)
    assert sorted((s["name"], s["why"]) for s in before["strays"]) == [
        ("bake.json", "a FIFO"),
        ("held.json", "a symbolic link"),
        ("revisions/r1", "a revision holding a symbolic link (.env)"),
    ]
    assert before["held"] is None and before["set_aside"] == []
    _, table = run_cli("status", "--config", str(path))
    line = next(ln for ln in table.splitlines() if ln.startswith("not a record"))
    assert "held.json is a symbolic link" in line and "bake.json is a FIFO" in line
    assert (state / "held.json").is_symlink(), "status moves nothing"

    assert tick(estate, cfg).code == "OK"
    _, out = run_cli("status", "--json", "--config", str(path))
    after = json.loads(out)
    assert after["strays"] == []
    assert sorted((a["name"], a["kind"]) for a in after["set_aside"]) == [
        ("bake.json", "a FIFO"),
        ("held.json", "a symbolic link"),
        ("revisions/r1", "a directory"),
    ]
    _, table = run_cli("status", "--config", str(path))
    line = next(ln for ln in table.splitlines() if ln.startswith("set aside"))
    assert " and 2 more (state dir's aside/)" in line
    assert shadow.read_text() == "root:$6$precious\n"
    assert "precious" not in out + table
