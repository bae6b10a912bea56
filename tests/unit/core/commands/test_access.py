"""core.commands.access: the fix names no group root, never "add to group X" for a member of X, and
(by the mode arithmetic) grants the access once applied. tests/integration/box/test_access_real.py
applies the fixes to real files for a real user."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.commands import access, checks

USER = access.Who("monky-deployd", 990, frozenset({990, 120}), "monky-deployd")  # 120: docker
GROUPS = {0: "root", 990: "monky-deployd", 120: "docker", 121: "ziti"}
OWNERS = {0: "root", 990: "monky-deployd", 1000: "alice"}


def apply(fix: str, who: access.Who, f: access.Target) -> tuple[access.Who, access.Target]:
    """What the fix's commands do to the ids and the mode (chmod, chgrp, usermod)."""
    for step in fix.strip("`").split(" && "):
        verb, *args = step.split()
        if verb == "chmod":
            cls, bits = args[0].split("+")
            val = (4 if "r" in bits else 0) | (2 if "w" in bits else 0)
            f = access.Target(
                f.path, f.uid, f.owner, f.gid, f.group, f.mode | val << (6 if cls == "u" else 3)
            )
        elif verb == "chgrp":
            gid = next(g for g, n in GROUPS.items() if n == args[0])
            f = access.Target(f.path, f.uid, f.owner, gid, args[0], f.mode)
        elif verb == "usermod":
            gid = next(g for g, n in GROUPS.items() if n == args[1])
            who = access.Who(who.user, who.uid, who.gids | {gid}, who.primary_group)
        else:
            raise AssertionError(step)
    return who, f


@given(
    st.sampled_from(sorted(OWNERS)),
    st.sampled_from(sorted(GROUPS)),
    st.integers(0, 0o777),
    st.sampled_from([4, 6]),
)
def test_the_fix_grants_and_never_names_group_root(
    uid: int, gid: int, mode: int, want: int
) -> None:
    f = access.Target("/etc/ziti/env.json", uid, OWNERS[uid], gid, GROUPS[gid], mode)
    if checks.access_via(USER.uid, USER.gids, uid, gid, mode, want) is not None:
        return  # the user gets in already: no fault, no hint
    fix = access.fix(USER, f, want)
    assert "-aG root" not in fix and "chgrp root" not in fix
    for g in USER.gids:
        assert f"-aG {GROUPS[g]} " not in fix  # never "add to a group it is in"
    who, fixed = apply(fix, USER, f)
    assert checks.access_via(who.uid, who.gids, fixed.uid, fixed.gid, fixed.mode, want)
    assert len(fix) < 120
    reason = access.why_not(USER, f, want)
    if gid in USER.gids and uid != USER.uid:
        assert "is in its group" in reason


def test_the_issues_two_cases() -> None:
    root_0600 = access.Target("/e.json", 0, "root", 0, "root", 0o600)
    assert access.fix(USER, root_0600) == "`chgrp monky-deployd /e.json && chmod g+r /e.json`"
    in_ziti = access.Who("monky-deployd", 990, frozenset({990, 121}), "monky-deployd")
    ziti_0000 = access.Target("/e.json", 0, "root", 121, "ziti", 0o000)
    assert access.fix(in_ziti, ziti_0000) == "`chmod g+r /e.json`"
    assert access.why_not(in_ziti, ziti_0000) == (
        "monky-deployd is in its group ziti but mode 0000 does not let the group read it"
    )
