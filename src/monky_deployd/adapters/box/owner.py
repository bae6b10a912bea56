"""The state dir's owner: the account every write to it is made as.

The unit runs as the service user (``monky-deployd``), which owns the state dir. A command run by
root that writes there (``apply``, ``suspend``, ``resume``) first becomes that user
(``become_owner``: supplementary groups, group, then user, before the state dir is touched), so
it never leaves a file the timer's next tick cannot replace. A state dir that already holds
entries another account owns (a root shell's ``apply`` before this existed) is named, entry by
entry, with the ``chown`` that mends it (``poisoned_error``: the tick's STATE_UNWRITABLE and
doctor's ``state-dir`` check).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from monky_deployd.core.errors import Code, DeployError

SERVICE_USER = "monky-deployd"
WALK_LIMIT = 20_000  # entries looked at, at most (revision dirs are small; this bounds a mess)
NAMED = 6  # entries named in the sentence; the rest counted


def service_account(state_dir: Path) -> pwd.struct_passwd | None:
    """The account the state dir belongs to: its owner when that is not root, else the
    ``monky-deployd`` account when it exists (a state dir not made yet, or made by root); None
    on a box without a service user (a developer's, where root may own everything)."""
    try:
        uid = state_dir.stat().st_uid
    except OSError:
        uid = 0
    if uid != 0:
        try:
            return pwd.getpwuid(uid)
        except KeyError:
            return None
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        return None


def owner_name(state_dir: Path) -> str:
    account = service_account(state_dir)
    return account.pw_name if account is not None else _name(os.geteuid())


def become_owner(state_dir: Path) -> str | None:
    """Root only: become the state dir's account (``initgroups``, ``setgid``, ``setuid``; HOME,
    USER and LOGNAME follow) and return its name. None when this process is not root or the box
    has no such account (nothing to switch to: root stays root)."""
    if os.geteuid() != 0:
        return None
    account = service_account(state_dir)
    if account is None or account.pw_uid == 0:
        return None
    os.initgroups(account.pw_name, account.pw_gid)
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)
    os.environ.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name)
    return account.pw_name


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def foreign_entries(state_dir: Path, uid: int) -> tuple[list[tuple[str, int]], int]:
    """Entries under ``state_dir`` (itself included, as ``.``) not owned by ``uid``: the first
    ``NAMED`` as (path relative to the state dir, ``/`` after a directory; owner uid), and how
    many in all. No link is followed; at most ``WALK_LIMIT`` entries are looked at."""
    named: list[tuple[str, int]] = []
    total = 0
    seen = 0
    try:
        top = os.lstat(state_dir)
    except OSError:
        return named, 0
    if top.st_uid != uid:
        named.append((".", top.st_uid))
        total = 1
    stack = [state_dir]
    while stack and seen < WALK_LIMIT:
        here = stack.pop()
        try:
            with os.scandir(here) as entries:
                found = list(entries)
        except OSError:
            continue
        for entry in sorted(found, key=lambda e: e.name):
            seen += 1
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if st.st_uid != uid:
                total += 1
                if len(named) < NAMED:
                    rel = Path(entry.path).relative_to(state_dir).as_posix()
                    named.append((rel + ("/" if is_dir else ""), st.st_uid))
            if is_dir:
                stack.append(Path(entry.path))
    return named, total


def poisoned_error(state_dir: Path) -> DeployError | None:
    """STATE_UNWRITABLE naming the entries of ``state_dir`` its account does not own, their
    owners and the ``chown`` to run; None when every entry is its account's (or the box has
    no service user to speak for)."""
    account = service_account(state_dir)
    if account is None:
        return None
    named, total = foreign_entries(state_dir, account.pw_uid)
    if not total:
        return None
    user = account.pw_name
    owners = sorted({_name(uid) for _, uid in named})
    shown = ", ".join(f"{rel} ({_name(uid)})" for rel, uid in named)
    more = f" and {total - len(named)} more" if total > len(named) else ""
    try:
        group = grp.getgrgid(account.pw_gid).gr_name
    except KeyError:
        group = str(account.pw_gid)
    return DeployError(
        f"{state_dir} holds {total} entr{'y' if total == 1 else 'ies'} owned by "
        f"{', '.join(owners)}, not {user} (the unit's user), which cannot replace them: "
        f"{shown}{more}",
        code=Code.STATE_UNWRITABLE,
        hint=f"`chown -R {user}:{group} {state_dir}` (a command run as root by an older "
        "version left them)",
    )


def explain(state_dir: Path, err: DeployError) -> DeployError:
    """A tick's STATE_UNWRITABLE, replaced by the entries that cause it when the state dir
    holds some its account does not own (``poisoned_error``); any other fault as it is."""
    if err.code is not Code.STATE_UNWRITABLE:
        return err
    return poisoned_error(state_dir) or err
