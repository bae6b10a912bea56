from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monky_deployd.adapters.box.state import Applied, StateDir
from monky_deployd.adapters.fsutil import atomic_write
from monky_deployd.core.errors import LockBusy


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
        "os.replace = lambda *a: os.kill(os.getpid(), 9)\n"
        "f.atomic_write(__import__('pathlib').Path({!r}), b'new' * 1000)\n"
    ).format(str(Path(__file__).parents[3] / "src"), str(target))
    proc = subprocess.run([sys.executable, "-c", code], check=False)
    assert proc.returncode == -9
    assert target.read_bytes() == b"old"


def test_second_tick_waits_then_gives_up(tmp_path: Path) -> None:
    st = StateDir(tmp_path / "s").ensure()
    with st.lock(0), pytest.raises(LockBusy) as info, StateDir(st.root).lock(0.2):
        pass
    assert info.value.code == "LOCK_BUSY"
    assert f"pid {os.getpid()}" in info.value.message
    with st.lock(0):  # released
        pass
