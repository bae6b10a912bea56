"""docs/bundle-check.md's GitLab job (issue 47): its script, run as a GitLab runner runs it
(bash, errexit), passes every exit status of ``bundle check`` on as it is (5 refused, 2 usage, 1
cannot run here, 0 admitted), and prints the text verdict after a refusal only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "bundle-check.md"


def script() -> list[str]:
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    job = yaml.safe_load(block.group(1))["bundle:check"]
    lines: list[str] = job["script"]
    return lines


@pytest.mark.parametrize("status", [0, 1, 2, 5])
def test_the_documented_job_keeps_the_exit_statuses_apart(tmp_path: Path, status: int) -> None:
    stub = tmp_path / "monky-deployd"
    calls = tmp_path / "calls"
    stub.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexit {status}\n')
    stub.chmod(0o755)
    body = "\n".join(line.replace("/opt/monky/bin/monky-deployd", str(stub)) for line in script())
    proc = subprocess.run(
        ("bash", "-e", "-o", "pipefail", "-c", body),
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "CI_COMMIT_SHORT_SHA": "abc123"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == status, proc.stderr
    made = calls.read_text().splitlines()
    assert len(made) == (2 if status == 5 else 1), made
    assert "--format json" in made[0] and "--revision abc123" in made[0]
