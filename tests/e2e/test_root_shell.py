"""A root shell on a box whose state dir belongs to the service user (issue 27): the real CLI
as a subprocess run by root, a real system user created for the test, real files.

- ``apply --once``, ``suspend`` and ``resume`` typed as root leave no entry in the state dir the
  service user does not own (the command became that user before touching anything);
- a state dir a root ``apply`` poisoned before that (root-owned ``docker/``, ``token.json``) is
  named entry by entry with the ``chown`` to run, by the tick and by ``doctor``.

The CLI runs under the system's /usr/bin/python3 with the venv's packages on PYTHONPATH: after
the switch the process reads its lazily imported modules as the service user, as on a box (from
a copy it can read when the clone lies under a 0700 directory: testkit/readable.py).
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit import readable
from monky_deployd_testkit.fakes.estate import Estate

SYSTEM_PYTHON = Path("/usr/bin/python3")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not SYSTEM_PYTHON.exists(), reason="needs root and /usr/bin/python3"
)


def system_user(prefix: str) -> Iterator[pwd.struct_passwd]:
    """A system account with its own group and a random suffix (workers keep apart), removed
    after."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ("useradd", "--system", "--user-group", "--no-create-home", "--shell", "/bin/false", name),
        check=True,
    )
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(("userdel", name), check=False)
        subprocess.run(("groupdel", name), check=False, capture_output=True)


@pytest.fixture(scope="module")
def service_user() -> Iterator[pwd.struct_passwd]:
    yield from system_user("mdrt")


@pytest.fixture
def box(service_user: pwd.struct_passwd) -> Iterator[tuple[Path, Path, Estate[Any]]]:
    """(config path, state dir, estate): the state dir and grant owned by the service user, in
    a directory every user may traverse (pytest's tmp_path is root's 0700)."""
    top = Path(tempfile.mkdtemp(prefix="monky-root-"))
    top.chmod(0o755)
    estate: Estate[Any] = Estate(env="env-root-01").start()
    try:
        state = top / "state"
        state.mkdir(mode=0o700)
        os.chown(state, service_user.pw_uid, service_user.pw_gid)
        grant = estate.write_grant(top / "grant.jwt")
        os.chown(grant, service_user.pw_uid, service_user.pw_gid)
        cfg = estate.config(state_dir=state, grant_file=grant)
        cfg["service_user"] = service_user.pw_name  # the unit's account: the only one root becomes
        cfg["locks"] = {"dir": str(top / "locks")}
        config = top / "config.yaml"
        config.write_text(yaml.safe_dump(cfg))
        config.chmod(0o644)
        yield config, state, estate
    finally:
        estate.stop()
        subprocess.run(("rm", "-rf", str(top)), check=False)


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # the service user imports what the switch left to import: a copy it can read when the
    # clone lies under a directory only root may enter (testkit/readable.py)
    env = {"PATH": os.environ["PATH"], "HOME": "/root", "PYTHONPATH": readable.pythonpath()}
    return subprocess.run(
        (str(SYSTEM_PYTHON), "-m", "monky_deployd.cli", *args, "--config", str(config)),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def not_owned(state: Path, uid: int) -> list[str]:
    out = [] if state.lstat().st_uid == uid else ["."]
    for root, dirs, files in os.walk(state):
        for name in (*dirs, *files):
            p = Path(root, name)
            if p.lstat().st_uid != uid:
                out.append(f"{p.relative_to(state)} (uid {p.lstat().st_uid})")
    return out


def test_root_apply_suspend_resume_leave_only_the_service_users_files(
    service_user: pwd.struct_passwd, box: tuple[Path, Path, Estate[Any]]
) -> None:
    config, state, estate = box
    assert estate is not None
    tick = cli(config, "apply", "--once")
    assert "Traceback" not in tick.stderr, tick.stderr
    lines = [json.loads(ln) for ln in tick.stdout.splitlines() if ln.startswith("{")]
    written = sorted(p.name for p in state.iterdir())
    assert "ledger.json" in written and "lock" in written, (written, tick.stdout)
    assert not_owned(state, service_user.pw_uid) == []
    assert any(f"running as {service_user.pw_name}" in ln["message"] for ln in lines), tick.stdout
    assert cli(config, "suspend", "--reason", "by hand").returncode == 0
    assert (state / "suspend.json").exists()
    assert not_owned(state, service_user.pw_uid) == []
    assert cli(config, "resume").returncode == 0
    assert not_owned(state, service_user.pw_uid) == []
    again = cli(config, "apply", "--once")  # the next tick (as root again) is not refused
    assert "STATE_UNWRITABLE" not in again.stdout, again.stdout
    assert not_owned(state, service_user.pw_uid) == []


def test_a_poisoned_state_dir_is_named_by_the_tick_and_doctor(
    service_user: pwd.struct_passwd, box: tuple[Path, Path, Estate[Any]]
) -> None:
    config, state, _ = box
    (state / "docker").mkdir(mode=0o700)  # what a root `apply --once` left before
    (state / "token.json").write_text("{}")
    (state / "ledger.json").write_text("{}")
    user = service_user.pw_name
    chown = f"`chown -R {user}:{user} {state}`"
    tick = cli(config, "apply", "--once")
    errors = [json.loads(ln) for ln in tick.stdout.splitlines() if ln.startswith("{")]
    first = next(e for e in errors if e.get("level") == "ERROR")  # the first error line
    assert first["code"] == "STATE_UNWRITABLE", tick.stdout
    assert (
        f"{state} holds 3 entries owned by root, not {user} (the unit's user), which cannot "
        "replace them: docker/ (root), ledger.json (root), token.json (root)" in first["message"]
    ), first
    assert chown in first["message"], first
    assert tick.returncode == 1
    doctor = cli(config, "doctor")
    line = next(ln for ln in doctor.stdout.splitlines() if " state-dir:" in ln)
    # root's apply refused before it switched (issue 36): nothing was replaced, doctor names
    # the same three entries
    assert line.startswith(
        f"FAIL state-dir: {state} holds 3 entries owned by root, not {user} (the unit's user), "
        "which cannot replace them: docker/ (root), ledger.json (root), token.json (root). "
        "Check: "
    ), line
    assert chown in line and len(line) < 400, line
    assert doctor.returncode == 2
    subprocess.run(("chown", "-R", f"{user}:{user}", str(state)), check=True)  # the hint, done
    fixed = cli(config, "doctor")
    assert f"OK state-dir: {state}: every entry belongs to {user}" in fixed.stdout, fixed.stdout
    assert sys.executable  # the suite's interpreter is not the one the CLI ran under


@pytest.fixture
def another_user() -> Iterator[pwd.struct_passwd]:
    """An account that is not the unit's (the package's default one, on a box whose unit runs
    as another)."""
    yield from system_user("mdot")


def test_status_and_doctor_as_root_hold_the_state_dir_to_service_user(
    service_user: pwd.struct_passwd,
    another_user: pwd.struct_passwd,
    box: tuple[Path, Path, Estate[Any]],
) -> None:
    """config.yaml's ``service_user`` is one fact (issue 42): a state dir owned by another
    account (not root) is named by root's status and doctor with the chown to the unit's
    account, where they once took its owner for the unit's account and said OK."""
    config, state, _ = box
    assert cli(config, "apply", "--once").returncode in (0, 1)  # a ledger, as the unit's user
    subprocess.run(
        ("chown", "-R", f"{another_user.pw_name}:{another_user.pw_name}", str(state)), check=True
    )
    user = service_user.pw_name
    chown = f"`chown -R {user}:{user} {state}`"
    status = cli(config, "status")
    assert status.returncode == 15, status.stdout + status.stderr
    assert "STATE_UNWRITABLE" in status.stdout + status.stderr
    assert f"not {user} (the unit's user)" in status.stdout, status.stdout
    assert chown in status.stdout, status.stdout
    doctor = cli(config, "doctor")
    line = next(ln for ln in doctor.stdout.splitlines() if " state-dir:" in ln)
    assert line.startswith(f"FAIL state-dir: {state} holds "), line
    assert f"owned by {another_user.pw_name}, not {user} (the unit's user)" in line, line
    assert chown in line, line
    subprocess.run(("chown", "-R", f"{user}:{user}", str(state)), check=True)  # the hint, done
    fixed = cli(config, "doctor")
    assert f"OK state-dir: {state}: every entry belongs to {user}" in fixed.stdout, fixed.stdout
    assert cli(config, "status").returncode != 15
