"""The CLI as an operator runs it: exit codes, first error lines, log formats, the lock."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import yaml

from monky_deployd_testkit.fakes.estate import Estate
from monky_deployd_testkit.lab import CLI, parse_lines


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"]}
    return subprocess.run((*CLI, *args), capture_output=True, text=True, env=env, check=False)


def test_usage_error_exits_2() -> None:
    assert run("apply", "now").returncode == 2
    assert run("frobnicate").returncode == 2
    assert run("--version").stdout.startswith("monky-deployd ")


def test_invalid_config_exits_3_naming_file_and_keys(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("env: env-dev-08\ntenancy: {port: 'https'}\nsate_dir: /tmp/x\n")
    proc = run("apply", "--once", "--config", str(cfg))
    assert proc.returncode == 3
    lines = parse_lines(proc.stdout)
    first = lines[0]
    assert first["level"] == "ERROR" and first["code"] == "CONFIG_INVALID"
    assert str(cfg) in first["message"]
    assert (
        "at 'tenancy.port'" in first["message"] and "at 'sate_dir': unknown key" in first["message"]
    )
    assert lines[-1]["event"] == "tick.summary" and lines[-1]["outcome"] == "refused"
    assert "Traceback" not in proc.stdout + proc.stderr


def test_missing_config_exits_3(tmp_path: Path) -> None:
    proc = run("apply", "--once", "--config", str(tmp_path / "none.yaml"))
    assert proc.returncode == 3
    assert parse_lines(proc.stdout)[0]["code"] == "CONFIG_MISSING"


def test_lock_busy_exits_4_and_touches_nothing(tmp_path: Path) -> None:
    with Estate(env="env-cli-01") as estate:
        state = tmp_path / "state"
        state.mkdir(mode=0o700)
        cfg = estate.config(state_dir=state, grant_file=estate.write_grant(tmp_path / "g.jwt"))
        cfg["lock_wait_s"] = 0.3
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        with open(state / "lock", "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            proc = run("apply", "--once", "--config", str(path))
        assert proc.returncode == 4
        first = parse_lines(proc.stdout)[0]
        assert first["code"] == "LOCK_BUSY"
        assert "another monky-deployd tick" in first["message"]
        assert estate.tenancy.requests == [] and estate.bao.requests == []


def test_text_log_format(tmp_path: Path) -> None:
    with Estate(env="env-cli-01") as estate:
        cfg = estate.config(
            state_dir=tmp_path / "s", grant_file=estate.write_grant(tmp_path / "g.jwt")
        )
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        proc = run("apply", "--once", "--config", str(path), "--log-format", "text")
    assert proc.returncode == 0, proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert "[summary] tick idle:" in last
    assert not last.startswith("{")


def test_ziti_identity_faults_are_named_first_through_the_cli(tmp_path: Path) -> None:
    """transport: ziti with a missing identity, then `{}` (which crashes the 0.6 SDK): the tick
    names the identity fault in its first error line, in the transport phase, and exits 5."""
    identity = tmp_path / "env-cli-01.json"
    cfg = {
        "env": "env-cli-01",
        "transport": "ziti",
        "identity": str(identity),
        "state_dir": str(tmp_path / "state"),
        "grant_file": str(tmp_path / "grant.jwt"),
        "metrics": {"textfile_dir": None},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    for content, code in ((None, "IDENTITY_MISSING"), ("{}", "IDENTITY_INCOMPLETE")):
        if content is not None:
            identity.write_text(content)
        proc = run("apply", "--once", "--config", str(path))
        assert proc.returncode == 5, proc.stdout + proc.stderr
        errors = [ln for ln in parse_lines(proc.stdout) if ln["level"] == "ERROR"]
        assert errors[0]["code"] == code and errors[0]["phase"] == "transport"
        assert str(identity) in errors[0]["message"]
