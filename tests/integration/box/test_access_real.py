"""The identity/socket/config hints' fix, applied as written to real files, lets a real user in
(issue 27): a real system user, a group it is in, one it is not, another owner; every owner,
group and mode hypothesis picks. The check is the kernel's: a child process that became the
user (initgroups, setgid, setuid) opens the file."""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters import accounts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creates users and files as root")


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture(scope="module")
def people() -> Iterator[dict[str, str]]:
    tag = uuid.uuid4().hex[:6]
    names = {
        "user": f"mdu{tag}",
        "other": f"mdo{tag}",
        "member": f"mdm{tag}",
        "outside": f"mdx{tag}",
    }
    _sh("groupadd", "--system", names["member"])
    _sh("groupadd", "--system", names["outside"])
    for who in ("user", "other"):
        _sh("useradd", "--system", "--user-group", "--no-create-home", names[who])
    _sh("usermod", "-aG", names["member"], names["user"])
    top = Path(tempfile.mkdtemp(prefix="monky-access-"))
    top.chmod(0o755)
    names["dir"] = str(top)
    try:
        yield names
    finally:
        subprocess.run(("rm", "-rf", str(top)), check=False)
        for who in ("user", "other"):
            subprocess.run(("userdel", names[who]), check=False, capture_output=True)
            subprocess.run(("groupdel", names[who]), check=False, capture_output=True)
        for g in ("member", "outside"):
            subprocess.run(("groupdel", names[g]), check=False, capture_output=True)


def opens_as(user: str, path: Path, want: int) -> bool:
    """A child that became ``user`` (its groups as /etc/group says now) opens ``path``."""
    pw = pwd.getpwnam(user)
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            os.initgroups(user, pw.pw_gid)
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            os.close(os.open(path, os.O_RDWR if want == 6 else os.O_RDONLY))
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    owner=st.sampled_from(["root", "user", "other"]),
    group=st.sampled_from(["root", "user", "member", "outside"]),
    mode=st.integers(0, 0o777),
    want=st.sampled_from([4, 6]),
)
def test_the_fix_applied_lets_the_user_in(
    people: dict[str, str], owner: str, group: str, mode: int, want: int
) -> None:
    user = people["user"]
    path = Path(people["dir"], uuid.uuid4().hex)
    path.write_text("{}")
    os.chown(
        path,
        0 if owner == "root" else pwd.getpwnam(people[owner]).pw_uid,
        0 if group == "root" else grp.getgrnam(people[group]).gr_gid,
    )
    path.chmod(mode)
    if opens_as(user, path, want):
        return  # no fault, no hint
    fix = accounts.fix_for(user, path, want)
    assert fix is not None and fix.startswith("`") and fix.endswith("`")
    assert "-aG root" not in fix and f"-aG {people['member']}" not in fix
    for step in fix.strip("`").split(" && "):
        _sh(*shlex.split(step))
    try:
        assert opens_as(user, path, want), (fix, oct(mode), owner, group)
    finally:
        if "usermod" in fix:
            _sh("gpasswd", "-d", user, people["outside"])
