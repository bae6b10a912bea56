"""``monky-deployd doctor`` as an operator runs it (the real CLI as a subprocess): one line per
check on stdout, no colour in a pipe, and the exit status 2 with a config that does not load
(every check that needs it SKIP, naming it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from monky_deployd.agent.commands import doctor
from monky_deployd_testkit.lab import CLI


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"]}
    if os.environ.get("PYTHONPATH"):  # a worktree's tests run that worktree's code
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run((*CLI, *args), capture_output=True, text=True, env=env, check=False)


def test_a_missing_config_is_the_first_line_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "none.yaml"
    proc = run("doctor", "--config", str(missing))
    assert proc.returncode == 2
    lines = proc.stdout.splitlines()
    assert len(lines) == len(doctor.CHECKS)
    assert lines[0].startswith(f"FAIL config: {missing}") and " Check: " in lines[0]
    # the timer and the unit's last tick need no config: they are asked all the same
    skipped = [ln for ln in lines[1:] if ln.split(" ")[1] not in ("timer:", "last-tick:")]
    assert len(skipped) == len(lines) - 3
    assert all(ln.endswith("needs config (FAIL above).") for ln in skipped)
    assert "\033[" not in proc.stdout and "Traceback" not in proc.stderr


def test_json_in_a_pipe(tmp_path: Path) -> None:
    proc = run("doctor", "--json", "--config", str(tmp_path / "none.yaml"))
    body = json.loads(proc.stdout)
    assert proc.returncode == 2
    assert body[0]["code"] == "CONFIG_MISSING" and body[1]["status"] == "SKIP"


def test_help_exits_0() -> None:
    assert run("doctor", "--help").returncode == 0
