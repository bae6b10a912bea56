from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monky_deployd.adapters.box.state.state import Applied, StateDir
from monky_deployd.adapters.fsutil import atomic_write
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.records.applied import HostFacts, Stored, TokenState


def test_ensure_creates_private_dirs(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "state").ensure()
    for d in (st.root, st.docker_dir, st.revisions_dir):
        assert d.stat().st_mode & 0o777 == 0o700


def test_revision_files_are_private_and_applied_roundtrips(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "s").ensure()
    d = st.write_revision("r1", "services: {}\n", "A='x'\n")
    assert (d / ".env").stat().st_mode & 0o777 == 0o600
    assert (d / "compose.yaml").read_text() == "services: {}\n"
    st.write_applied(Applied("r1", "shop", ["web"], "t"))
    assert st.applied_file.stat().st_mode & 0o777 == 0o600
    assert st.read_applied() == Applied("r1", "shop", ["web"], "t")
    # rewriting a revision replaces it whole
    st.write_revision("r1", "services: {a: {}}\n", "")
    assert (d / ".env").read_text() == ""
    assert not list(st.revisions_dir.glob(".r1.*"))


def test_applied_record_without_its_project_dir_is_ignored(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "s").ensure()
    st.write_applied(Applied("r9", "shop"))
    assert st.read_applied() is None


def test_torn_applied_record_is_ignored(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "s").ensure()
    st.applied_file.write_text('{"revision": "r1", "proj')
    assert st.read_applied() is None


def test_atomic_write_keeps_old_file_when_rename_never_happens(tmp_path: Path) -> None:
    target = tmp_path / "f"
    atomic_write(target, b"old")
    # a writer killed mid-write leaves only its temp file behind
    code = (
        "import os,sys; sys.path.insert(0, {!r})\n"
        "import monky_deployd.adapters.fsutil as f\n"
        "os.replace = lambda *a, **k: os.kill(os.getpid(), 9)\n"
        "f.atomic_write(__import__('pathlib').Path({!r}), b'new' * 1000)\n"
    ).format(str(Path(__file__).parents[3] / "src"), str(target))
    proc = subprocess.run([sys.executable, "-c", code], check=False)
    assert proc.returncode == -9
    assert target.read_bytes() == b"old"


def test_second_tick_waits_then_gives_up(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "s").ensure()
    with st.lock(0), pytest.raises(DeployError) as info, StateDir(st.root).lock(0.2):
        pass
    assert info.value.code is Code.LOCK_BUSY
    assert f"pid {os.getpid()}" in info.value.message
    with st.lock(0):  # released
        pass


def test_state_dir_owns_every_path_under_state_dir(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "s")
    paths = (st.lock_file, st.applied_file, st.token_file, st.host_file, st.docker_dir)
    assert [p.relative_to(st.root).as_posix() for p in (*paths, st.revisions_dir)] == [
        "lock", "applied.json", "token.json", "host.json", "docker", "revisions",
    ]  # fmt: skip
    assert st.revision_dir("r1") == st.revisions_dir / "r1"


def test_token_record_roundtrips_private_and_unusable_is_a_reason(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "s").ensure()
    assert st.read_token() is None
    state = TokenState("env-a", Stored("lease", "hvs.SECRET", 1.5, 2.5, True, "lse_1", 60, "j"))
    st.write_token(state)
    assert st.token_file.stat().st_mode & 0o777 == 0o600
    assert st.token_file.read_bytes() == state.to_json()
    assert st.read_token() == state
    st.token_file.write_bytes(state.to_json()[:-20])
    with pytest.raises(ValueError, match="torn or truncated") as info:
        st.read_token()
    assert "hvs.SECRET" not in str(info.value)


def test_host_facts_roundtrip_private_and_unreadable_is_none(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "s").ensure()
    assert st.read_host_facts() is None
    facts = HostFacts(hostname="box-1", docker="29.0.1", compose="2.40.0")
    st.write_host_facts(facts)
    assert st.host_file.stat().st_mode & 0o777 == 0o600
    assert st.host_file.read_bytes() == (
        b'{"hostname": "box-1", "docker": "29.0.1", "compose": "2.40.0"}'
    )
    assert st.read_host_facts() == facts
    for raw in (b"", b'{"hostname": "box-1"', b'{"hostname": "box-1"}'):
        st.host_file.write_bytes(raw)
        assert st.read_host_facts() is None


def test_applied_record_bytes_are_those_of_the_old_writer(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "s").ensure()
    st.write_revision("r1", "services: {}\n", "")
    st.write_applied(Applied("r1", "shop", ["web", "db"], "2026-01-01T00:00:00.000Z"))
    assert st.applied_file.read_bytes() == (
        b'{\n  "applied_at": "2026-01-01T00:00:00.000Z",\n  "project": "shop",\n'
        b'  "revision": "r1",\n  "services": [\n    "web",\n    "db"\n  ]\n}'
    )
    st.applied_file.write_text('{"revision": "r1", "project": "shop", "services": "web"}')
    assert st.read_applied() is None


def test_projects_the_agent_started_are_kept_private_bounded_and_torn_is_none(
    tmp_path: Path,
) -> None:
    st = StateDir(tmp_path / "s").ensure()
    assert st.read_projects() == frozenset()
    st.own_project("shop")
    st.own_project("shop-v2")
    st.own_project("shop")
    assert st.projects_file.stat().st_mode & 0o777 == 0o600
    assert st.read_projects() == {"shop", "shop-v2"}
    for i in range(100):
        st.own_project(f"p{i}")
    assert len(st.read_projects()) == 64 and "p99" in st.read_projects()
    st.write_revision("r1", "services: {}\n", "")
    st.write_applied(Applied("r1", "applied-one"))
    assert "applied-one" in st.read_projects()  # the applied project always counts
    for torn in (b"", b"{", b"[1]", b'{"names": [1, {}]}', b'{"names": "x"}'):
        atomic_write(st.projects_file, torn, 0o600)
        assert st.read_projects() == {"applied-one"}
    st.own_project("again")  # a torn record is replaced, not a fault
    assert st.read_projects() == {"applied-one", "again"}


def test_the_sweep_removes_a_killed_ticks_half_writes_only(tmp_path: Path) -> None:
    from monky_deployd.adapters.box.state import leftovers

    st = StateDir(tmp_path / "s").ensure()
    st.write_revision("r1", "services: {}\n", "A='1'\n")
    half = [
        st.root / ".applied.json.0123456789ab.tmp",
        st.docker_dir / ".config.json.abcdef012345.tmp",
        st.revisions_dir / ".r2.staging" / ".env.0123456789ab.tmp",
    ]
    (st.revisions_dir / ".r2.staging").mkdir()
    # killed between the two renames of a re-written revision: r3 is only in .r3.old
    (st.revisions_dir / ".r3.old").mkdir()
    (st.revisions_dir / ".r3.old" / "compose.yaml").write_text("services: {}\n")
    kept = [
        st.root / ".suspend.json.0123456789ab.tmp",  # `suspend` writes without the tick's lock
        st.root / "outbox",
        st.revisions_dir / "r1" / "compose.yaml",
    ]
    (st.root / "outbox").mkdir()
    for path in half + kept[:1]:
        path.write_bytes(b"x")
    swept = leftovers.sweep(st)
    assert not any(p.exists() for p in half)
    assert all(p.exists() for p in kept)
    assert (st.revisions_dir / "r3" / "compose.yaml").is_file()
    assert not (st.revisions_dir / ".r3.old").exists()
    assert len(swept) == 4
    assert leftovers.sweep(st) == []
