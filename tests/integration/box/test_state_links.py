"""A symbolic link planted in the state dir is never followed: whichever entry it replaces and
whatever it points at (a file or a directory outside), the target keeps its bytes, mode and
mtime. Among the state dir's own entries (a record, the lock, ``docker/``, ``revisions/``) the
link is set aside like any wrong-typed entry and the tick goes on (issue 26: it refused every
tick, so a dead service was never restored); deeper, ``docker/config.json`` is set aside the
same way, and a revision holding a link is set aside whole. Real files, real links."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd import config as config_mod
from monky_deployd.adapters.box.docker.docker_config import write_docker_config
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent.commands import status
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.core.commands import status as core_status
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.records.applied import Applied, Stored, TokenState
from monky_deployd.core.wire.checkin import HostFacts
from monky_deployd_testkit.fakes.estate import Estate

# Every entry the agent writes, relative to state_dir.
ENTRIES = (
    "lock",
    "docker",
    "revisions",
    "token.json",
    "applied.json",
    "host.json",
    ".token.room",
    "docker/config.json",
    "revisions/r1",
    "revisions/.r1.staging",
    "revisions/.r1.old",
    "revisions/r1/.env",
    "revisions/r1/compose.yaml",
)
Snapshot = dict[str, tuple[bytes | None, int, int]]


def snapshot(root: Path) -> Snapshot:
    """Every path under ``root`` (itself included): its bytes (files), mode and mtime."""
    out: Snapshot = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        out[str(path.relative_to(root))] = (data, info.st_mode, info.st_mtime_ns)
    return out


def outside(base: Path, payload: bytes, mode: int) -> Path:
    """A directory outside the state dir holding a victim file and a victim directory."""
    out = base / "outside"
    (out / "victim-dir").mkdir(parents=True)
    (out / "victim-dir" / "keep.txt").write_bytes(payload)
    (out / "victim-file").write_bytes(payload)
    for path in (out / "victim-file", out / "victim-dir" / "keep.txt"):
        path.chmod(mode)
    (out / "victim-dir").chmod(0o755)
    return out


def populated(root: Path) -> StateDir:
    """A state dir as a few ticks leave it (a revision r1, every record)."""
    state = StateDir(root).ensure()
    with state.lock(0):
        pass
    state.write_token(TokenState(env="env-links-01"))
    state.write_applied(Applied("r1", "shop"))
    state.write_host_facts(HostFacts(hostname="h", docker="1", compose="2"))
    state.write_revision("r1", "services: {}\n", "A=1\n")
    write_docker_config(state.docker_dir, None, None)
    return state


def plant(root: Path, entry: str, target: Path) -> Path:
    link = root / entry
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(target)
    return link


def every_write(state: StateDir) -> list[Code]:
    """Every write the agent makes, each tried even when the others refuse; their codes."""
    lease = Stored("lease", "s.tok", 1.0, 2.0, True, "lse_1", issued_ttl_s=1)
    ops = (
        lambda: state.lock(0).__enter__(),
        lambda: state.write_token(TokenState(env="env-links-01", token=lease)),
        lambda: state.reserve_token_room(512),
        lambda: state.write_applied(Applied("r2", "shop")),
        lambda: state.write_host_facts(HostFacts(hostname="x", docker="3", compose="4")),
        lambda: state.write_revision("r1", "services: {x: {}}\n", "SECRET=planted\n"),
        lambda: write_docker_config(state.docker_dir, None, None),
        lambda: state.read_token(),
        lambda: state.prune_revisions(set()),
    )
    codes = []
    for op in ops:
        try:
            op()
        except DeployError as err:
            codes.append(err.code)
        except ValueError:
            pass  # a record that is not one: read as absent
    return codes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entry=st.sampled_from(ENTRIES),
    to_dir=st.booleans(),
    payload=st.binary(min_size=0, max_size=64),
    mode=st.sampled_from((0o600, 0o640, 0o644, 0o755)),
)
def test_a_planted_link_is_set_aside_and_its_target_untouched(
    entry: str, to_dir: bool, payload: bytes, mode: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        out = outside(base, payload, mode)
        root = base / "state"
        populated(root)
        before = snapshot(out)
        link = plant(root, entry, out / ("victim-dir" if to_dir else "victim-file"))

        StateDir(root).ensure()  # set aside, unfollowed: the path is free, the link in aside/
        assert not link.is_symlink()
        assert any(p.is_symlink() for p in (root / "aside").rglob("*"))

        # and each write on its own, past ensure(), follows no link either
        every_write(StateDir(root))
        assert snapshot(out) == before


@pytest.mark.parametrize(
    "entry", ["lock", "docker", "revisions", "token.json", "host.json", "held.json", "bake.json"]
)
def test_a_link_among_the_state_dirs_entries_is_set_aside_and_the_tick_goes_on(
    entry: str, tmp_path: Path
) -> None:
    out = outside(tmp_path, b"precious\n", 0o644)
    root = tmp_path / "state"
    populated(root)
    before = snapshot(out)
    link = plant(
        root, entry, out / ("victim-dir" if entry in ("docker", "revisions") else "victim-file")
    )
    with Estate(env="env-links-01") as estate:
        cfg = estate.config(state_dir=root, grant_file=estate.write_grant(tmp_path / "g.jwt"))
        parsed = config_mod.parse(cfg, "test")
        rec = run_tick(parsed, clock=estate.clock.now)
        assert estate.tenancy.requests != []  # it checked in: the tick went on
        shown = status.view(parsed, engine=False)
    assert rec.code != "STATE_LINK", rec.message
    assert shown["set_aside"][0]["name"] == entry  # status says what was set aside
    line = next(ln for ln in core_status.table(shown).splitlines() if ln.startswith("set aside"))
    assert f"{entry} (a symbolic link) at " in line
    assert not link.is_symlink() and any(p.is_symlink() for p in (root / "aside").iterdir())
    assert snapshot(out) == before


def test_a_state_dir_that_is_itself_a_link_is_allowed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "state").symlink_to(real)
    populated(tmp_path / "state")
    assert (real / "token.json").is_file()
    assert os.stat(real).st_mode & 0o777 == 0o700
