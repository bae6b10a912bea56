"""A tick is bounded: in time (one overall deadline, its children included), in what a SIGKILL
leaves running, and in leases when the state filesystem is full. Whole ticks against the loopback
fakes; counts, never durations."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd import config as config_mod
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.fakes.engine import FakeEngine
from monky_deployd_testkit.fakes.estate import Estate

ENV = "env-bounds-02"
GOOD = {
    "project": "shop",
    "compose": "services:\n  web:\n    image: 127.0.0.1:1/web:1\n",
    "env_template": "",
    "manifest": [],
}
NO_HEADROOM = {"headroom_bytes": 0}  # the pre-flight passes on any test filesystem


@pytest.fixture
def estate() -> Iterator[Estate]:
    with Estate(env=ENV) as est:
        yield est


def config(estate: Estate, tmp: Path, **overrides: Any) -> dict[str, Any]:
    return estate.config(
        state_dir=tmp / "state", grant_file=estate.write_grant(tmp / "grant.jwt"), **overrides
    )


def tick(estate: Estate, tmp: Path, **overrides: Any) -> TickRecord:
    return run_tick(
        config_mod.parse(config(estate, tmp, **overrides), "test"), clock=estate.clock.now
    )


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[FakeEngine]:
    """The Engine API the pre-flight and the ownership check ask (no Docker needed)."""
    with FakeEngine(tmp_path) as eng:
        yield eng


def sleeping_docker(tmp: Path, engine: FakeEngine) -> dict[str, Any]:
    """``docker`` config: a CLI that answers `version` and `compose version` at once, then hangs
    in the pull (the first docker child after the pre-flight, as a hung daemon would): it notes
    its pid and sleeps; the engine is the loopback one."""
    stub = tmp / "docker-stub"
    stub.write_text(
        "#!/bin/sh\n"
        'case "$*" in version*|"compose version"*) echo 99.0.0; exit 0;; esac\n'
        f'echo $$ > "{tmp}/docker.pid"\n'
        "exec sleep 300\n"
    )
    stub.chmod(0o755)
    return {"binary": str(stub), "host": engine.host_url}


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(predicate: Any, limit_s: float = 30.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


# -- the tick's deadline ---------------------------------------------------------------------


def test_a_dripping_tenancy_ends_the_tick_at_its_deadline(estate: Estate, tmp_path: Path) -> None:
    """The deadline is far longer than the tick takes to reach its lease on a loaded box (a
    1.5 s one could run out before it asked) and far shorter than the dripped answer (> 12 s)."""
    estate.tenancy.drip_s = 0.1  # each byte long before any per-read timeout
    rec = tick(estate, tmp_path, tick_deadline_s=6)
    assert rec.code == "TICK_DEADLINE"
    assert estate.tenancy.wait_cut(1)  # the agent hung up; it did not wait for the drip
    assert "POST /lease" in rec.message  # named where the time ran out


def test_a_tick_past_its_deadline_stops_at_the_next_phase(estate: Estate, tmp_path: Path) -> None:
    rec = tick(estate, tmp_path, tick_deadline_s=0.000001)
    assert rec.code == "TICK_DEADLINE"
    assert "before the transport phase" in rec.message
    assert estate.tenancy.requests == [] and estate.bao.requests == []


def test_a_dripping_openbao_is_cut_at_the_request_deadline(estate: Estate, tmp_path: Path) -> None:
    estate.bao.drip_s = 0.1
    bao = {"host": estate.bao.host, "port": estate.bao.port, "deadline_s": 1}
    rec = tick(estate, tmp_path, openbao=bao)
    assert rec.code == "OPENBAO_UNREACHABLE"
    assert "deadline of 1 s" in rec.message
    assert estate.bao.wait_cut(1)


def test_a_child_gets_the_time_left_and_is_gone_when_the_tick_ends(
    estate: Estate, engine: FakeEngine, tmp_path: Path
) -> None:
    estate.tenancy.set_desired("r1", GOOD)
    docker = {**sleeping_docker(tmp_path, engine), "command_timeout_s": 600}
    # the tick reaches its pull (the hanging child) well inside the deadline on a loaded box:
    # 1.5 s of a 2 s deadline at a load of 7 (the first tick of a process, its imports too)
    rec = tick(estate, tmp_path, tick_deadline_s=10, docker=docker, disk=NO_HEADROOM)
    assert rec.code == "TICK_DEADLINE"
    pid = int((tmp_path / "docker.pid").read_text())
    assert not alive(pid)
    assert len(estate.tenancy.reports) == 1  # the failure is still reported


def test_a_sigkilled_agent_takes_its_child_with_it(
    estate: Estate, engine: FakeEngine, tmp_path: Path
) -> None:
    estate.tenancy.set_desired("r1", GOOD)
    cfg = config(estate, tmp_path, docker=sleeping_docker(tmp_path, engine), disk=NO_HEADROOM)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    agent = subprocess.Popen(
        (sys.executable, "-m", "monky_deployd.cli", "apply", "--once", "--config",
         str(tmp_path / "config.yaml")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
    )  # fmt: skip
    pidfile = tmp_path / "docker.pid"
    try:
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
        child = int(pidfile.read_text())
        assert alive(child)
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait()
    try:
        assert wait_for(lambda: not alive(child))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


# -- a full state filesystem -----------------------------------------------------------------


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs (root only; skipped elsewhere)."""
    mnt = tmp_path / f"tiny-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    proc = subprocess.run(
        ("mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mnt)),
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(("umount", "-l", str(mnt)), check=False)


def fill_up(directory: Path) -> Path:
    """Write zeros until the filesystem says ENOSPC (even a one-byte write fails after)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
        with pytest.raises(OSError) as info:
            os.write(fd, b"\0")
        assert info.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_a_full_state_fs_spends_no_lease_and_one_when_space_returns(
    estate: Estate, tmp_path: Path, tiny_fs: Path
) -> None:
    def run() -> TickRecord:
        cfg = estate.config(
            state_dir=tiny_fs / "state", grant_file=estate.write_grant(tmp_path / "grant.jwt")
        )
        return run_tick(config_mod.parse(cfg, "test"), clock=estate.clock.now)

    # first tick: a bootstrap token is stored, tenancy's budget is spent for a minute: the box
    # holds a bootstrap token and needs a lease
    busy = {"error": {"code": "LEASE_RATE_LIMITED", "message": "spent", "retry_after_s": 60}}
    estate.tenancy.fail_next(429, json.dumps(busy).encode(), path_contains="lease")
    assert run().outcome == "idle"
    estate.clock.advance(61)
    assert estate.tenancy.leases == []
    assert json.loads((tiny_fs / "state" / "token.json").read_text())["token"]["kind"] == (
        "bootstrap"
    )

    filler = fill_up(tiny_fs)
    codes = [run().code for _ in range(5)]
    assert codes == ["TOKEN_UNSTORABLE"] * 5
    assert estate.tenancy.leases == []  # not one lease minted and lost

    filler.unlink()
    assert run().outcome == "idle"
    assert len(estate.tenancy.leases) == 1
    stored = json.loads((tiny_fs / "state" / "token.json").read_text())["token"]
    assert stored["kind"] == "lease" and stored["lease_id"] == estate.tenancy.leases[0].id


def test_a_fresh_box_on_a_full_state_fs_is_named_and_spends_nothing(
    estate: Estate, tmp_path: Path, tiny_fs: Path
) -> None:
    fill_up(tiny_fs)
    cfg = estate.config(
        state_dir=tiny_fs / "state", grant_file=estate.write_grant(tmp_path / "grant.jwt")
    )
    rec = run_tick(config_mod.parse(cfg, "test"), clock=estate.clock.now)
    assert rec.code in ("STATE_UNWRITABLE", "TOKEN_UNSTORABLE")
    assert "No space left on device" in rec.message
    assert estate.tenancy.leases == []
