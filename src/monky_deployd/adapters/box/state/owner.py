"""The state dir's owner: the account every write to it is made as.

The unit runs as the service user (``monky-deployd``, config.yaml's ``service_user``), which owns
the state dir. A command run by root that writes there (``apply``, ``suspend``, ``resume``)
first becomes that user and no other (``become_owner``: supplementary groups, group, then user,
before the state dir is touched), so it never leaves a file the timer's next tick cannot
replace; a state dir that is a link, another account's, or writable by group or others is
refused first (``unsafe``: STATE_DIR_UNSAFE), so a planted directory never chooses the account.
A state dir that already holds entries another account owns (a root shell's ``apply`` before
this existed) is named, entry by entry, with the ``chown`` that mends it (``poisoned_error``:
the tick's STATE_UNWRITABLE and doctor's ``state-dir`` check).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

SERVICE_USER = "monky-deployd"
WALK_LIMIT = 20_000  # entries looked at, at most (revision dirs are small; this bounds a mess)
NAMED = 6  # entries named in the sentence; the rest counted


def service_account(state_dir: Path, user: str = SERVICE_USER) -> pwd.struct_passwd | None:
    """The account the state dir belongs to: the unit's (``user``, config.yaml's
    ``service_user``) when it exists, whoever owns the state dir now; on a box without that
    account (a developer's), the state dir's owner when that is not root, else None (root may
    own everything)."""
    try:
        return pwd.getpwnam(user)
    except KeyError:
        pass
    try:
        uid = state_dir.stat().st_uid
    except OSError:
        uid = 0
    if uid != 0:
        try:
            return pwd.getpwuid(uid)
        except KeyError:
            return None
    return None


def owner_name(state_dir: Path, user: str = SERVICE_USER) -> str:
    account = service_account(state_dir, user)
    return account.pw_name if account is not None else _name(os.geteuid())


def become_owner(state_dir: Path, user: str = SERVICE_USER) -> str | None:
    """Root only: become the unit's account ``user`` (config.yaml's ``service_user``:
    ``initgroups``, ``setgid``, ``setuid``; HOME, USER and LOGNAME follow) and return its name.
    None when this process is not root or the box has no such account (root stays root).
    STATE_DIR_UNSAFE first, nothing switched or run, when the state dir is not one that account
    may own alone (``unsafe``); STATE_UNWRITABLE, nothing switched or run, when it holds
    entries that account cannot replace (``poisoned_error``, counted as root)."""
    if os.geteuid() != 0:
        return None
    try:
        account: pwd.struct_passwd | None = pwd.getpwnam(user)
    except KeyError:
        account = None
    if (err := unsafe(state_dir, user, account)) is not None:
        raise err
    if account is None or account.pw_uid == 0:
        return None
    # entries the account cannot replace, counted while still root: once switched it could not
    # list a root-owned directory, and would name that directory alone (issue 36)
    if (err := poisoned_error(state_dir, user)) is not None:
        raise err
    os.initgroups(account.pw_name, account.pw_gid)
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)
    os.environ.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name)
    return account.pw_name


def unsafe(state_dir: Path, user: str, account: pwd.struct_passwd | None) -> DeployError | None:
    """STATE_DIR_UNSAFE when root's command may not act in ``state_dir`` (looked at with
    ``lstat``: no link followed): a symbolic link, not a directory, owned by an account other
    than ``user`` (or root), or writable by group or others; each with the one command that
    mends it. None when it is safe, or does not exist yet (the tick makes it)."""
    try:
        st = os.lstat(state_dir)
    except OSError:
        return None
    group = _group(account)
    owner = account.pw_name if account is not None else "root"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(state_dir)
        except OSError:
            target = "?"
        return _unsafe(
            f"{state_dir} is a symbolic link (to {target}); root's command follows no link to "
            "find the account it runs as",
            f"`rm {state_dir}` (the link only: the next tick makes the directory, owned by "
            f"{owner}; what the link led to stays where it is)",
        )
    if not stat.S_ISDIR(st.st_mode):
        return _unsafe(f"{state_dir} is not a directory", f"`mv {state_dir} {state_dir}.bad`")
    allowed = {0} | ({account.pw_uid} if account is not None else set())
    if st.st_uid not in allowed:
        whose = f"the unit's account {user}" if account else f"root ({user} does not exist here)"
        return _unsafe(
            f"{state_dir} is owned by {_name(st.st_uid)}, not {whose}: root's command would "
            f"act as {owner} in a directory {_name(st.st_uid)} controls",
            f"`chown -R {owner}:{group} {state_dir}`",
        )
    if st.st_mode & 0o022:
        return _unsafe(
            f"{state_dir} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}): "
            "another account could plant entries the tick then trusts",
            f"`chmod go-w {state_dir}`",
        )
    return None


def _unsafe(message: str, hint: str) -> DeployError:
    return DeployError(f"{message}; nothing was run", code=Code.STATE_DIR_UNSAFE, hint=hint)


def _group(account: pwd.struct_passwd | None) -> str:
    if account is None:
        return "root"
    try:
        return grp.getgrgid(account.pw_gid).gr_name
    except KeyError:
        return str(account.pw_gid)


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def foreign_entries(state_dir: Path, uid: int) -> tuple[list[tuple[str, int]], int, str]:
    """Entries under ``state_dir`` (itself included, as ``.``) not owned by ``uid``: the first
    ``NAMED`` as (path relative to the state dir, ``/`` after a directory; owner uid), how many
    in all, and the first directory this process could not list (``""``: none; the service
    user cannot look inside a root-owned 0700 state dir, root can). No link is followed; at
    most ``WALK_LIMIT`` entries are looked at."""
    named: list[tuple[str, int]] = []
    total = 0
    seen = 0
    unlisted = ""
    try:
        top = os.lstat(state_dir)
    except OSError:
        return named, 0, unlisted
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
            if not unlisted:
                rel = Path(here).relative_to(state_dir).as_posix()
                unlisted = str(state_dir) if rel == "." else rel + "/"
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
    return named, total, unlisted


def poisoned_error(state_dir: Path, user: str = SERVICE_USER) -> DeployError | None:
    """STATE_UNWRITABLE naming the entries of ``state_dir`` its account (``service_account``)
    does not own, their owners and the ``chown`` to run; None when every entry is its
    account's (or the box has no service user to speak for)."""
    account = service_account(state_dir, user)
    if account is None:
        return None
    named, total, unlisted = foreign_entries(state_dir, account.pw_uid)
    if not total:
        return None
    user = account.pw_name
    owners = sorted({_name(uid) for _, uid in named})
    shown = ", ".join(
        f"{'the state dir itself' if rel == '.' else rel} ({_name(uid)})" for rel, uid in named
    )
    more = f" and {total - len(named)} more" if total > len(named) else ""
    at_least = "at least " if unlisted else ""
    inside = (
        f"; {_name(os.geteuid())} cannot list {unlisted} (Permission denied), so what lies "
        "inside is not counted"
        if unlisted
        else ""
    )
    group = _group(account)
    return DeployError(
        f"{state_dir} holds {at_least}{total} entr{'y' if total == 1 else 'ies'} owned by "
        f"{', '.join(owners)}, not {user} (the unit's user), which cannot replace them: "
        f"{shown}{more}{inside}",
        code=Code.STATE_UNWRITABLE,
        hint=_chown(user, group, state_dir),
    )


def _chown(user: str, group: str, state_dir: Path) -> str:
    from monky_deployd.core.commands import fixes  # (a fault's hint: off the no-op tick)

    return fixes.state_chown(user, group, str(state_dir))


def chown_hint(state_dir: Path, user: str = SERVICE_USER) -> str:
    """The one command that gives ``state_dir`` back to the unit's account (as root)."""
    account = service_account(state_dir, user)
    group = _group(account) if account is not None else user
    user = account.pw_name if account is not None else user
    return _chown(user, group, state_dir)


def explain(state_dir: Path, err: DeployError, user: str = SERVICE_USER) -> DeployError:
    """A tick's STATE_UNWRITABLE, replaced by the entries that cause it when the state dir
    holds some its account does not own (``poisoned_error``); any other fault as it is."""
    if err.code is not Code.STATE_UNWRITABLE:
        return err
    return poisoned_error(state_dir, user) or err
