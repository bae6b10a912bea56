"""R8: the tenancy intercept is 443; the in-pod listener's number appears only in statements about
the in-pod listener.

Walks every tracked file plus untracked files git does not ignore (so a new file is held before its
first commit), skips binary files, and fails on each line that carries the in-pod port number
without saying it is the in-pod listener ("in-pod" or "inside the pod" on the same line).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from monky_deployd import config

REPO = Path(__file__).resolve().parents[2]
IN_POD = str(8000 + 81)  # spelled so that this file's own lines need no exemption
NUMBER = re.compile(rf"(?<![0-9]){IN_POD}(?![0-9])")
ABOUT_THE_POD = ("in-pod", "inside the pod")


def repository_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    names = sorted({name for name in listed.decode().split("\0") if name})
    return [REPO / name for name in names if not name.startswith(".git/")]


def text_of(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):  # deleted in the work tree, or a submodule
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def is_offending(line: str) -> bool:
    return bool(NUMBER.search(line)) and not any(w in line.lower() for w in ABOUT_THE_POD)


def offending_lines() -> list[str]:
    found = []
    for path in repository_files():
        text = text_of(path)
        if text is None or IN_POD not in text:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if is_offending(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:160]}")
    return found


def test_the_in_pod_port_appears_only_in_statements_about_the_in_pod_listener() -> None:
    offenders = offending_lines()
    assert not offenders, (
        f"{IN_POD} is the tenancy pod's in-pod listener; the intercept is 443. These lines use it "
        "without saying so:\n" + "\n".join(offenders)
    )


def test_the_walk_sees_the_repository() -> None:
    files = {p.relative_to(REPO).as_posix() for p in repository_files()}
    assert "src/monky_deployd/config.py" in files
    assert "tests/repo/test_port_443.py" in files
    assert not any(name.startswith(".git/") for name in files)


def test_the_check_catches_a_bare_port() -> None:
    """The matcher itself: a bare use is caught, a statement about the pod is not, 18081 is not."""
    lines = [
        f"tenancy: {{host: tenancy.monky.ziti, port: {IN_POD}}}",
        f"The pod listens on {IN_POD} inside the pod.",
        f"port {IN_POD} is the in-pod listener",
        f"port: 1{IN_POD}",
    ]
    assert [line for line in lines if is_offending(line)] == [lines[0]]


def test_the_config_default_is_the_intercept() -> None:
    assert config.TENANCY_INTERCEPT_PORT == 443
    assert config.parse({"env": "env-dev-08"}, "test").tenancy.port == 443
