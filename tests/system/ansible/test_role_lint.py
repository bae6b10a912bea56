"""The role and the example playbook pass ansible-lint's production profile and yamllint."""

from __future__ import annotations

import os
import subprocess

from tests.system.debian import REPO

VENV_BIN = REPO / ".venv" / "bin"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}", NO_COLOR="1")
    return subprocess.run(
        list(argv), capture_output=True, text=True, cwd=REPO, env=env, timeout=300
    )


def test_ansible_lint_production_profile_passes() -> None:
    proc = _run(str(VENV_BIN / "ansible-lint"), "ansible/")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in proc.stdout + proc.stderr


def test_yamllint_passes() -> None:
    proc = _run(
        str(VENV_BIN / "yamllint"), "-s", "ansible/", ".gitlab-ci.yml", ".ansible-lint", ".yamllint"
    )
    assert proc.returncode == 0, proc.stdout
