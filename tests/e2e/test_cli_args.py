"""The command line as an operator types it (the real CLI as a subprocess, issue 27): global
options before or after the command and from $MONKY_DEPLOYD_CONFIG, `apply` alone, each command's
and sub-action's own help with its exit statuses, status's own answer on a config error, and a
doctor check that waits saying so on a terminal."""

from __future__ import annotations

import json
import os
import pty
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from monky_deployd.cliargs import CONFIG_ENV, commands
from monky_deployd_testkit.lab import CLI

ALL = [" ".join(words) for words in commands()]


def base_env() -> dict[str, str]:
    """PATH, and PYTHONPATH when set (a worktree's own sources first)."""
    keep = ("PATH", "PYTHONPATH")
    return {k: os.environ[k] for k in keep if k in os.environ}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**base_env(), **(env or {})}
    return subprocess.run(
        (*CLI, *args), capture_output=True, text=True, env=full, check=False, timeout=120
    )


def test_the_command_list_is_the_parsers() -> None:
    assert {"apply", "status", "doctor", "plan", "suspend", "resume", "lock"} <= set(ALL)
    assert {"lock list", "lock take", "lock release"} <= set(ALL)


@pytest.mark.parametrize("words", ALL)
def test_each_command_has_its_own_help_with_its_exit_statuses(words: str) -> None:
    proc = run(*words.split(), "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith(f"usage: monky-deployd {words} "), text.splitlines()[0]
    section = text.split("\nExit status:\n", 1)
    assert len(section) == 2, f"`{words} --help` has no 'Exit status:' section"
    statuses = [ln.split()[0] for ln in section[1].splitlines() if ln[:4].strip().isdigit()]
    assert "0" in statuses and "2" in statuses, section[1]
    assert len(statuses) == len(set(statuses)), f"an exit status listed twice: {statuses}"
    for option in ("--config", "--debug", "--log-format"):
        assert option in text, f"`{words} --help` does not show {option}"


def test_helps_are_distinct_per_sub_action() -> None:
    """`lock list --help` is not `lock --help` (it was, before issue 27)."""
    bodies = {w: run(*w.split(), "--help").stdout.split("\n", 2)[2] for w in ALL}
    assert len(set(bodies.values())) == len(bodies)
    assert "List the update locks" in run("lock", "list", "--help").stdout


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["-c", "{f}", "status"], {}),
        (["--config", "{f}", "status"], {}),
        (["status", "-c", "{f}"], {}),
        (["--config={f}", "status"], {}),
        (["status"], {CONFIG_ENV: "{f}"}),
        (["-c", "{f}", "status"], {CONFIG_ENV: "/etc/not-this.yaml"}),  # the flag wins
    ],
)
def test_config_before_or_after_the_command_or_from_the_environment(
    tmp_path: Path, argv: list[str], env: dict[str, str]
) -> None:
    missing = str(tmp_path / "missing.yaml")
    proc = run(
        *(a.format(f=missing) for a in argv),
        "--json",
        env={k: v.format(f=missing) for k, v in env.items()},
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["state"] == "config_error" and body["error"]["code"] == "CONFIG_MISSING"
    assert missing in body["error"]["message"]


def test_status_without_a_config_answers_in_its_own_forms(tmp_path: Path) -> None:
    """Not a tick's log lines ("tick refused"): status's JSON schema, or its state row."""
    missing = str(tmp_path / "none.yaml")
    as_json = run("status", "--json", "-c", missing)
    body = json.loads(as_json.stdout)
    assert as_json.returncode == 3 == body["exit_status"]
    assert {"schema", "state", "exit_status", "reason", "error"} <= set(body)
    assert "tick refused" not in as_json.stdout + as_json.stderr
    text = run("status", "-c", missing)
    assert text.returncode == 3
    assert text.stdout.startswith("state  config_error (exit 3): CONFIG_MISSING: ")
    assert "tick" not in text.stdout + text.stderr


def test_plan_json_without_a_config_is_its_schema(tmp_path: Path) -> None:
    proc = run("plan", "--json", "-c", str(tmp_path / "none.yaml"))
    assert proc.returncode == 3
    body = json.loads(proc.stdout)
    assert body["changes"] is None and body["error"]["code"] == "CONFIG_MISSING"


@pytest.mark.parametrize("words", [w for w in ALL if w != "lock" and not w.startswith("bundle")])
def test_debug_and_log_format_are_accepted_by_every_command(tmp_path: Path, words: str) -> None:
    missing = str(tmp_path / "none.yaml")
    args = [*words.split(), "--debug", "--log-format", "json", "-c", missing]
    if words == "lock take":
        args.insert(2, "ops")
    proc = run(*args)
    assert "usage:" not in proc.stderr, proc.stderr  # never a usage error
    if words == "doctor":  # config.yaml is doctor's first check: its FAIL (exit 2)
        assert proc.returncode == 2 and proc.stdout.startswith("FAIL config: ")
    else:
        assert proc.returncode == 3, proc.stderr


@pytest.mark.parametrize("before", [True, False])
def test_bundle_verify_takes_the_global_config(tmp_path: Path, before: bool) -> None:
    """``bundle verify`` without ``--public-key`` reads config.yaml's trust settings from the
    global ``-c`` (before or after the command): a missing one is exit 3, not a usage error."""
    bundle = tmp_path / "bundle.json"
    bundle.write_text("{}")
    opts = ["--debug", "--log-format", "json", "-c", str(tmp_path / "none.yaml")]
    words = ["bundle", "verify", "--env", "e", "--revision", "r", str(bundle)]
    proc = run(*(opts + words if before else words + opts))
    assert "usage:" not in proc.stderr, proc.stderr
    assert proc.returncode == 3 and "CONFIG_MISSING" in proc.stderr, proc.stderr


def test_apply_alone_is_one_tick(tmp_path: Path) -> None:
    """`apply` without --once runs the tick (here: refused for its missing config, exit 3)."""
    proc = run("apply", "-c", str(tmp_path / "none.yaml"))
    assert proc.returncode == 3, proc.stderr
    assert '"code": "CONFIG_MISSING"' in proc.stdout
    assert run("apply", "--once", "-c", str(tmp_path / "none.yaml")).returncode == 3


def test_a_doctor_check_that_waits_says_what_for_on_a_terminal(tmp_path: Path) -> None:
    """tenancy accepts the connection and never answers: on a terminal, doctor says it waits
    for tenancy before its lines; in a pipe it says nothing extra."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    cfg = {
        "env": "env-cli-01",
        "transport": "plain",
        "tenancy": {"host": "127.0.0.1", "port": port, "timeout_s": 3},
        "openbao": {"host": "127.0.0.1", "port": port, "timeout_s": 3},
        "state_dir": str(tmp_path / "state"),
        "grant_file": str(tmp_path / "grant.jwt"),
        "metrics": {"textfile_dir": None},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    try:
        primary, secondary = pty.openpty()
        with os.fdopen(primary, "rb", buffering=0) as reader:
            proc = subprocess.Popen(
                (*CLI, "doctor", "-c", str(path)),
                stdout=subprocess.PIPE,
                stderr=secondary,
                env=base_env(),
            )
            os.close(secondary)
            out, _ = proc.communicate(timeout=120)
            err = b""
            while True:
                try:
                    chunk = reader.read(4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                err += chunk
        piped = run("doctor", "-c", str(path))
    finally:
        silent.close()
    said = err.decode()
    assert "doctor: tenancy: waiting for tenancy to answer" in said, said
    assert "FAIL tenancy" in out.decode() or "tenancy" in out.decode()
    assert "waiting for" not in piped.stderr
