"""A user's ids and a file's owner, group and mode, as ``core.access`` takes them (from
/etc/passwd, /etc/group and ``stat``): who the unit's user is, whoever asks."""

from __future__ import annotations

import grp
import pwd
from pathlib import Path

from monky_deployd.core import access


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
    """``core.access.fix`` for ``user`` and ``path``; None when either cannot be looked up."""
    try:
        return access.fix(who(user), target(path), want)
    except (KeyError, OSError):
        return None


def why_not(user: str, path: Path, want: int = 4) -> str | None:
    try:
        return access.why_not(who(user), target(path), want)
    except (KeyError, OSError):
        return None
