"""Fuzz: whatever is planted in the state dir, the lock dir or the outbox, the real tick (in
process, against the loopback fakes, no Docker), ``status`` and ``lock list`` end with a value or
a named refusal: no traceback, no hang, bounded memory, no secret in any output, and once the
planted entries are gone the next tick converges.

Every entry type (FIFO, directory, symbolic link (to a secret file, a FIFO, a directory, itself,
nowhere), socket, empty, huge (a sparse file of 1 GiB), garbage, non-UTF-8, JSON with out-of-range
numbers) at every record path (``docker/config.json`` and a revision's files too), as a lock file
(under hostile names too) and as an outbox entry (and in place of the outbox itself). When every
planted entry is of a wrong type (not a regular file, or over its cap), the tick ends as it would
with none planted (issue 26: a link refused every tick with STATE_LINK) and each link's target is
untouched. The
example count is this file's own (``EXAMPLES``: each example runs two ticks): 40 in CI, 10 with
MONKY_FUZZ=quick, 1,500 with MONKY_FUZZ=deep. ``TRIED`` counts the planted entries and examples.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import resource
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from monky_deployd import cli
from monky_deployd import config as config_mod
from monky_deployd.agent.commands import status
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.core.commands import status as core_status
from monky_deployd_testkit.fakes.estate import Estate

EXAMPLES = {"ci": 40, "quick": 10, "deep": 1500}[os.environ.get("MONKY_FUZZ") or "ci"]
SECRET = "fuzz-SECRET-7f3a9c1e5b"
HUGE = 1024**3  # sparse: no disk, but a reader that reads it whole needs 1 GiB
MEMORY_MAX = 200 * 1024 * 1024  # the growth of the process's peak RSS an example may cause
ENV = "env-fuzz-state-01"
BAD = {"project": "shop", "compose": ""}  # refused at the bundle check: no Docker needed
TRIED = {"examples": 0, "entries": 0}

RECORDS = [
    "applied.json", "token.json", "host.json", "held.json", "suspend.json", "journal.json",
    "hash.key", "projects.json", "ledger.json", "waiting.json", "bake.json", "lock", "docker",
    "revisions", "outbox", ".token.room", "docker/config.json", "revisions/r1",
    "revisions/r1/.env", "revisions/r1/compose.yaml", "revisions/r1/release.json",
]  # fmt: skip
LOCK_NAMES = [
    b"app.lock", b"x\x1b]0;pwned\x07\x1b[2J.lock", b"\xff\xfe.lock", b"a" * 100 + b".lock",
    b"line\nbreak.lock", "sep\u2028arator".encode() + b".lock",
]  # fmt: skip
OUTBOX_NAMES = ["000000000000001-t1.json", "999999999999999-t9.json", "junk.json", "x.tmp"]
LINKS = ["symlink", "link_to_fifo", "link_to_dir", "link_loop", "link_dangling"]
WRONG = ["fifo", "dir", "socket", *LINKS]  # not a file: set aside (state dir), ignored (locks)
KINDS = [*WRONG, "empty", "huge", "garbage", "non_utf8", "numbers"]

places = (
    st.tuples(st.just("record"), st.sampled_from(RECORDS))
    | st.tuples(st.just("lock"), st.sampled_from(LOCK_NAMES))
    | st.tuples(st.just("outbox"), st.sampled_from(OUTBOX_NAMES))
)
plantings = st.lists(st.tuples(places, st.sampled_from(KINDS), st.binary(max_size=64)), max_size=4)


@pytest.fixture(scope="module")
def estate() -> Iterator[Estate[Any]]:
    with Estate(env=ENV) as est:
        yield est
    # what the property tried, for the report (``-s`` shows it)
    print(f"\nstate-dir fuzzer: {TRIED['examples']} examples, {TRIED['entries']} planted entries")


class Collect(logging.Handler):
    """Every log record the agent emits, as the text a journal line could carry."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.tracebacks = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.tracebacks += 1
        fields = {k: v for k, v in record.__dict__.items() if k not in ("args", "exc_info")}
        self.lines.append(record.getMessage() + " " + json.dumps(fields, default=str))


def plant(base: Path, where: tuple[str, Any], kind: str, payload: bytes, secret: Path) -> None:
    place, name = where
    if place == "record":
        directory, entry = base / "state", os.fsencode(name)
    elif place == "lock":
        directory, entry = base / "locks", name
    else:
        directory, entry = base / "state" / "outbox", os.fsencode(name)
    if os.path.lexists(directory) and not directory.is_dir():
        return  # the outbox itself was planted as something else: nothing goes inside
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = os.path.join(os.fsencode(directory), entry)
    try:  # a revision's file: its directories (unless they were planted as something else)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    except OSError:
        return
    with contextlib.suppress(FileNotFoundError):  # replace what is there (a file, a dir)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        os.mkdir(path)
        Path(os.fsdecode(path), "inner.json").write_text("{}")
    elif kind in LINKS:
        fifo, inside = secret.parent / "fifo", secret.parent / "dir"
        if not os.path.lexists(fifo):
            os.mkfifo(fifo)
            inside.mkdir()
        target = {
            "symlink": secret,
            "link_to_fifo": fifo,
            "link_to_dir": inside,
            "link_loop": Path(os.fsdecode(os.path.basename(path))),
            "link_dangling": secret.parent / "nowhere",
        }[kind]
        os.symlink(target, path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        try:  # a relative name: the whole path may be longer than a socket address can be
            os.chdir(os.path.dirname(path))
            sock.bind(os.path.basename(path))
        finally:
            os.chdir(here)
            sock.close()
    else:
        body = {
            "empty": b"",
            "garbage": payload,
            "non_utf8": b'{"holder": "\xff\xfe", "revision": "\xc3(' + payload,
            "numbers": b'{"version": 1, "env": "' + ENV.encode() + b'", "since": 1e999, '
            b'"until": 1e308, "ttl_s": 1e300, "attempts": 1e400, "revision": "r1", '
            b'"project": "shop", "at": -1e309, "phase": "up", "expires_at": 1e999}',
            "huge": b"",
        }[kind]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, body)
            if kind == "huge":
                os.ftruncate(fd, HUGE)
        finally:
            os.close(fd)


def remove(path: Path) -> None:
    """Remove a planted entry, never opening it (``shutil.rmtree`` opens a FIFO and waits)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _hung(signum: int, frame: object) -> None:
    raise TimeoutError("the tick, status or lock list did not end within the tick's deadline")


def write_config(base: Path, estate: Estate[Any]) -> tuple[config_mod.Config, Path]:
    raw = estate.config(state_dir=base / "state", grant_file=estate.write_grant(base / "grant.jwt"))
    raw["locks"] = {"dir": str(base / "locks")}
    raw["tick_deadline_s"] = 20.0
    path = base / "config.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(raw, default=str))))
    return config_mod.parse(raw, "test"), path


def lock_list(config_path: Path) -> tuple[int, str]:
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = cli.main(["lock", "list", "--config", str(config_path)])
    finally:
        root.handlers[:], root.level = handlers, level
    return rc, out.getvalue()


@example(planted=[(("record", "revisions/r1/.env"), "symlink", b"")], desired=True)
@example(planted=[(("record", "docker/config.json"), "link_loop", b"")], desired=False)
@example(planted=[(("record", "held.json"), "symlink", b"")], desired=True)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(planted=plantings, desired=st.booleans())
def test_nothing_planted_in_the_state_or_lock_dir_leaks_hangs_or_wedges(
    estate: Estate[Any], planted: list[tuple[tuple[str, Any], str, bytes]], desired: bool
) -> None:
    TRIED["examples"] += 1
    TRIED["entries"] += len(planted)
    base = Path(tempfile.mkdtemp(prefix="fz", dir="/tmp"))
    collect = Collect()
    logger = logging.getLogger("monky_deployd")
    logger.addHandler(collect)
    reports_before = len(estate.tenancy.reports)
    try:
        secret = base / "secret.env"
        secret.write_text(f'DB_PASSWORD="{SECRET}"\n{SECRET}\n')
        cfg, config_path = write_config(base, estate)
        (base / "state").mkdir(mode=0o700)
        (base / "locks").mkdir()
        for where, kind, payload in planted:
            plant(base, where, kind, payload, secret)
        if desired:
            estate.tenancy.set_desired("r1", BAD)
        else:
            estate.tenancy.clear_desired()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        # a hang (a FIFO opened for reading) fails the example instead of the whole run: the
        # tick, status, lock list and the tick after cleanup get the tick's deadline and a margin
        signal.signal(signal.SIGALRM, _hung)
        signal.alarm(int(cfg.tick_deadline_s) + 30)

        rec = run_tick(cfg, clock=estate.clock.now, wire=estate.wire())
        assert rec.code not in ("INTERNAL", "STATE_LINK"), (planted, rec.message)
        if all(
            kind in WRONG or (kind, where[0]) == ("huge", "record") for where, kind, _ in planted
        ):
            # each set aside (the state dir's) or ignored (a lock's): as if none were there
            want = ("refused", "BUNDLE_INVALID") if desired else ("idle", "OK")
            assert (rec.outcome, rec.code) == want, (planted, rec.message)
        for (place, name), kind, _ in planted:
            if place == "record" and kind in LINKS:  # moved aside, unfollowed
                assert not os.path.islink(base / "state" / name), (planted, name)
        assert secret.read_text() == f'DB_PASSWORD="{SECRET}"\n{SECRET}\n'
        body = status.view(cfg, engine=False)
        shown = json.dumps(body) + core_status.table(body)
        rc, listed = lock_list(config_path)
        assert rc == 0, listed

        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak
        assert grown < MEMORY_MAX, f"peak RSS grew by {grown} bytes"
        assert collect.tracebacks == 0
        said = "\n".join(collect.lines) + shown + listed + rec.message + rec.detail
        said += json.dumps(estate.tenancy.reports[reports_before:])
        assert SECRET not in said
        assert "\x1b" not in shown + listed, "a lock name reached the terminal raw"

        # the planted entries removed (what was set aside stays aside): the next tick converges
        for directory in (base / "locks", base / "state" / "outbox"):
            remove(directory)
        for name in RECORDS:
            path = base / "state" / name
            if (
                path.is_symlink()
                or (path.exists() and not path.is_file())
                or (path.is_file() and path.stat().st_size > 1024 * 1024)
            ):
                remove(path)
        estate.tenancy.clear_desired()
        again = run_tick(cfg, clock=estate.clock.now, wire=estate.wire())
        assert (again.outcome, again.code) == ("idle", "OK"), (planted, again.message)
    finally:
        signal.alarm(0)
        logger.removeHandler(collect)
        estate.tenancy.clear_desired()
        shutil.rmtree(base, ignore_errors=True)
