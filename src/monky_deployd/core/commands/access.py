"""Why a user cannot read (or write) a file by its mode bits, and the one fix that lets it in on
this box. PURE: the caller gives the file's owner, group and mode, and the user's ids.

The fix never adds the user to group ``root`` (gid 0: it would open every root-group file), and
never says "add to group X" when the user already is in X or when X's bits give nothing
without a ``chmod`` too. Applied as written (tests/integration/box/test_access_real.py runs each one
against real files and a real user), it grants the access.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Who:
    user: str
    uid: int
    gids: frozenset[int]  # the groups the user's next process carries (/etc/group)
    primary_group: str


@dataclass(frozen=True)
class Target:
    path: str
    uid: int
    owner: str
    gid: int
    group: str
    mode: int  # st_mode (the permission bits are used)


def _bits(want: int) -> str:
    return "rw" if want == 6 else "r"


def why_not(who: Who, f: Target, want: int = 4) -> str:
    """The reason in a few words: which class the user falls in and what its bits give."""
    verb = "read and write" if want == 6 else "read"
    mode = f"mode {f.mode & 0o7777:04o}"
    if who.uid == f.uid:
        return f"{who.user} owns it but {mode} does not let its owner {verb} it"
    if f.gid in who.gids:
        return f"{who.user} is in its group {f.group} but {mode} does not let the group {verb} it"
    return f"{who.user} is neither its owner ({f.owner}) nor in its group ({f.group})"


def fix(who: Who, f: Target, want: int = 4) -> str:
    """One command line (``a && b`` when two steps) that grants ``who`` the access."""
    bits = _bits(want)
    if who.uid == f.uid:
        return f"`chmod u+{bits} {f.path}`"
    needs_bits = (f.mode >> 3) & want != want
    chmod = f"chmod g+{bits} {f.path}"
    if f.gid in who.gids:
        return f"`{chmod}`"
    if f.gid == 0:  # never group root: give the file the user's own group instead
        return f"`chgrp {who.primary_group} {f.path} && {chmod}`"
    usermod = f"usermod -aG {f.group} {who.user}"
    return f"`{usermod} && {chmod}`" if needs_bits else f"`{usermod}`"
