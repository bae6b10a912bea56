"""A user's ids and a file's owner, group and mode, as ``core.commands.access`` takes them (from
/etc/passwd, /etc/group and ``stat``): who the unit's user is, whoever asks."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from monky_deployd.core.commands import access


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def who(user: str) -> access.Who:
    """``user``'s ids as its next process gets them (initgroups: /etc/group)."""
    pw = pwd.getpwnam(user)
    gids = {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    return access.Who(user, pw.pw_uid, frozenset(gids), group_name(pw.pw_gid))


def target(path: Path) -> access.Target:
    st = path.stat()
    return access.Target(
        str(path), st.st_uid, user_name(st.st_uid), st.st_gid, group_name(st.st_gid), st.st_mode
    )


def fix_for(user: str, path: Path, want: int = 4) -> str | None:
    """``core.commands.access.fix`` for ``user`` and ``path``; None when either cannot be looked
    up."""
    try:
        return access.fix(who(user), target(path), want)
    except (KeyError, OSError):
        return None


def why_not(user: str, path: Path, want: int = 4) -> str | None:
    try:
        return access.why_not(who(user), target(path), want)
    except (KeyError, OSError):
        return None


def not_this_seat(path: Path, command: str) -> tuple[str, str] | None:
    """config.yaml closed to this user while it is as the package sets it (the file root,
    group monky-deployd, mode 0640, in a directory root:monky-deployd 0750: root's and the
    agent's alone, not an operator's): the sentence that says so and the one command that asks
    from a seat that reads it (root's, which speaks for the agent). None when what this user
    can see is not as the package sets it (then its ownership is the fault) or it is root."""
    me = os.geteuid()
    if me == 0:
        return None
    for where, mode in ((path, 0o640), (path.parent, 0o750)):
        try:
            st = where.stat()
        except OSError:  # the directory hides the file from this user: look at the directory
            continue
        if st.st_uid != 0 or group_name(st.st_gid) != "monky-deployd":
            return None
        if stat.S_IMODE(st.st_mode) != mode:
            return None
        return (
            f"{where} is root:monky-deployd mode {mode:04o} as the package sets it (root's "
            f"and the agent's alone), and {user_name(me)} is neither root nor in group "
            "monky-deployd",
            f"`sudo monky-deployd {command}`",
        )
    return None


def config_closed(path: Path, command: str, message: str) -> tuple[str, str] | None:
    """CONFIG_UNREADABLE's sentence and hint for this user (issue 36): an operator's seat while
    the file is as the package sets it (``not_this_seat``: the command from root's seat), else
    the ``chgrp``/``chmod`` that lets this user read it; None when neither can be told."""
    found = not_this_seat(path, command)
    if found is not None:
        return f"{message} ({found[0]})", found[1]
    fix = fix_for(user_name(os.geteuid()), path)
    if fix is None:
        return None
    return message, f"{fix} (the package sets root:monky-deployd 0640)"
