"""adapters/box/owner.unsafe on real files (issue 33): the state dir root's command would switch
into, looked at without following links. A link, a non-directory, another account's directory
or one writable by group or others is STATE_DIR_UNSAFE, and the hint's one command, run by
bash as written, mends it."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from monky_deployd.adapters.box.state import owner
from monky_deployd.core.errors import Code

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
NOBODY = pwd.getpwnam("nobody")


def link(state: Path) -> None:
    other = state.parent / "elsewhere"
    other.mkdir()
    os.chown(other, NOBODY.pw_uid, NOBODY.pw_gid)
    state.symlink_to(other)


def not_a_dir(state: Path) -> None:
    state.write_text("x")


def others(state: Path) -> None:
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY.pw_uid, NOBODY.pw_gid)


def group_writable(state: Path) -> None:
    state.mkdir()
    state.chmod(0o770)


@pytest.mark.parametrize("plant", [link, not_a_dir, others, group_writable])
@pytest.mark.parametrize("account", [None, "root"])
def test_an_unsafe_state_dir_is_refused_and_its_hint_mends_it(
    tmp_path: Path, plant: Callable[[Path], None], account: str | None
) -> None:
    state = tmp_path / "state"
    plant(state)
    who = pwd.getpwnam(account) if account else None
    err = owner.unsafe(state, "monky-deployd", who)
    assert err is not None and err.code is Code.STATE_DIR_UNSAFE
    assert str(state) in err.message and err.message.endswith("nothing was run")
    command = re.fullmatch(r"`([^`]+)`.*", err.hint)
    assert command is not None, err.hint
    subprocess.run(("bash", "-c", command.group(1)), check=True)
    if not state.exists():  # a link or a file moved away: the tick makes the directory
        state.mkdir(mode=0o700)
    assert owner.unsafe(state, "monky-deployd", who) is None


def test_a_missing_or_proper_state_dir_is_safe(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert owner.unsafe(state, "monky-deployd", None) is None
    state.mkdir(mode=0o700)
    assert owner.unsafe(state, "monky-deployd", None) is None
    os.chown(state, NOBODY.pw_uid, NOBODY.pw_gid)
    assert owner.unsafe(state, "nobody", NOBODY) is None
