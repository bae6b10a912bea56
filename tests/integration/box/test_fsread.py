"""fsread.read_entry, the one reader of the state and lock dirs, on real files of every type; the
state dir's records and the lock directory read through it."""

from __future__ import annotations

import json
import os
import resource
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monky_deployd.adapters import fsread
from monky_deployd.adapters.box import locks
from monky_deployd.adapters.box.state.layout import CAPS
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.core.records.ledger import MAX_BYTES

SECRET = "DB_PASSWORD=not-for-your-eyes-42"


def make(path: Path, kind: str, target: Path | None = None) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "symlink":
        assert target is not None
        path.symlink_to(target)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        try:
            os.chdir(path.parent)
            sock.bind(path.name)
        finally:
            os.chdir(here)
            sock.close()


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("fifo", "a FIFO"),
        ("dir", "a directory"),
        ("symlink", "a symbolic link"),
        ("socket", "a socket"),
    ],
)
def test_an_entry_of_the_wrong_type_is_named_never_read_never_waited_on(
    kind: str, why: str, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.env"
    secret.write_text(SECRET)
    path = tmp_path / "held.json"
    make(path, kind, secret)
    with pytest.raises(fsread.BadEntry) as info:
        fsread.read_entry(path, 1024)  # a FIFO without a writer: answered at once
    assert info.value.wrong_type and info.value.why == why
    assert str(info.value) == f"{path} is {why}" and SECRET not in str(info.value)


def test_absent_is_none_and_a_regular_file_is_read_whole_up_to_its_cap(tmp_path: Path) -> None:
    assert fsread.read_entry(tmp_path / "nothing", 10) is None
    assert fsread.read_entry(tmp_path / "no-dir" / "nothing", 10) is None
    (tmp_path / "f").write_bytes(b"0123456789")
    assert fsread.read_entry(tmp_path / "f", 10) == b"0123456789"
    with pytest.raises(fsread.BadEntry, match="larger than 9 bytes") as info:
        fsread.read_entry(tmp_path / "f", 9)
    assert not info.value.wrong_type


def test_a_link_at_the_parent_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "ledger.json").write_text(SECRET)
    (tmp_path / "state").symlink_to(real)
    with pytest.raises(fsread.BadEntry) as info:
        fsread.read_entry(tmp_path / "state" / "ledger.json", 1024)
    assert SECRET not in str(info.value)


def test_a_huge_sparse_file_costs_its_cap_not_its_size(tmp_path: Path) -> None:
    """Today's 600 MiB ledger.json read whole (656 MB RSS, MemoryError under MemoryMax=512M)."""
    path = tmp_path / "ledger.json"
    with open(path, "wb") as f:
        f.truncate(4 * 1024**3)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with pytest.raises(fsread.BadEntry, match=f"larger than {MAX_BYTES} bytes"):
        fsread.read_entry(path, MAX_BYTES)
    led, problem = StateDir(tmp_path).read_ledger()
    assert problem == f"{path} is larger than {MAX_BYTES} bytes" and led.last is None
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak < 64 * 1024**2


@settings(max_examples=50, deadline=None)
@given(raw=st.binary(min_size=1, max_size=64))
def test_decode_errors_are_named_by_byte_and_offset(raw: bytes) -> None:
    path = Path("/state/x")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        with pytest.raises(fsread.BadEntry) as info:
            fsread.decode(path, raw)
        assert f"byte 0x{raw[exc.start]:02x} at offset {exc.start}" in str(info.value)
    else:
        assert fsread.decode(path, raw) == text


@pytest.mark.parametrize("kind", ["fifo", "dir", "socket"])
@pytest.mark.parametrize("name", sorted(CAPS))
def test_ensure_sets_aside_a_record_of_the_wrong_type(kind: str, name: str, tmp_path: Path) -> None:
    root = tmp_path / "state"
    StateDir(root).ensure()
    make(root / name, kind)
    state = StateDir(root).ensure()  # no hang, no refusal: moved aside
    assert not (root / name).exists()
    aside = list(state.aside_dir.iterdir())
    assert len(aside) == 1 and aside[0].name.endswith(f"-{name}")
    assert state.read_held() is None and state.read_suspend() is None


def test_the_aside_dir_keeps_the_newest_entries_only(tmp_path: Path) -> None:
    from monky_deployd.adapters.box.state.aside import ASIDE_MAX

    root = tmp_path / "state"
    for _ in range(ASIDE_MAX + 3):
        StateDir(root).ensure()
        os.mkfifo(root / "held.json")
    state = StateDir(root).ensure()
    assert len(list(state.aside_dir.iterdir())) == ASIDE_MAX


# -- the lock directory -----------------------------------------------------------------------


def test_lock_entries_that_are_not_lock_files_are_ignored_and_named(tmp_path: Path) -> None:
    secret = tmp_path / "revision.env"
    secret.write_text(SECRET)
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    for kind in ("fifo", "dir", "symlink", "socket"):
        make(lock_dir / f"{kind}.lock", kind, secret)
    (lock_dir / "real.lock").write_text(json.dumps({"holder": "billing", "ttl_s": 60}))
    os.link(secret, lock_dir / "hardlink.lock")  # a lock, but not the app's own words
    found = locks.scan(lock_dir)
    assert [lk.name for lk in found.locks] == ["hardlink", "real"]
    assert found.locks[0].holder == "" and found.locks[1].holder == "billing"
    assert dict(found.ignored) == {
        "dir": "a directory",
        "fifo": "a FIFO",
        "socket": "a socket",
        "symlink": "a symbolic link",
    }
    assert SECRET not in repr(found)


def test_a_hostile_lock_name_and_holder_come_back_printable(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    name = b"x\x1b]0;pwned\x07\x1b[2J\xff" + b"a" * 100 + b".lock"
    with open(os.path.join(os.fsencode(lock_dir), name), "wb") as f:
        f.write(b"\x1b[31mred\nsecond line")
    (lk,) = locks.scan(lock_dir).locks
    assert lk.name.isprintable() and lk.holder == "\\x1b[31mred"
    assert lk.name.startswith("x\\x1b]0;pwned\\x07\\x1b[2J\\udcff") and len(lk.name) <= 67
