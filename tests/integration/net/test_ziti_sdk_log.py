"""The OpenZiti C SDK's own stderr lines never come before the agent's error line.

Under systemd stdout and stderr are one journal stream; here both go to one file, the way journald
receives them. The real 0.6 wheel complains (``ERROR ziti-sdk:ziti_ctrl.c ... connection refused``)
when the identity's controller refuses the connection: the agent's line must be the first ERROR
line, and the SDK's words must still be there (in its ``detail``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from monky_deployd_testkit.lab import CLI
from tests.integration.net.test_identity import identity_json, write

SRC = Path(__file__).resolve().parents[3] / "src"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_agents_line_is_first_and_carries_the_sdks_words(tmp_path: Path) -> None:
    identity = write(
        tmp_path / "env-cli-01.json", identity_json(f"https://127.0.0.1:{_closed_port()}")
    )
    cfg = {
        "env": "env-cli-01",
        "transport": "ziti",
        "identity": str(identity),
        "state_dir": str(tmp_path / "state"),
        "grant_file": str(tmp_path / "grant.jwt"),
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    stream = tmp_path / "journal"
    with stream.open("w") as out:  # stdout and stderr on one stream, as under systemd
        proc = subprocess.run(
            (*CLI, "apply", "--once", "--config", str(tmp_path / "config.yaml")),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={"PATH": os.environ["PATH"]},
            timeout=120,
            check=False,
        )
    assert proc.returncode == 1  # a transient fault: failed, not refused
    lines = stream.read_text().splitlines()
    first_error = next(ln for ln in lines if "ERROR" in ln)
    agent = json.loads(first_error)  # the agent's JSON line, not the SDK's
    assert agent["code"] == "ZITI_CONTROLLER_UNREACHABLE" and agent["phase"] == "transport"
    # The SDK's own words ride in the detail: it really complained, and nothing was lost.
    assert "ziti-sdk" in agent["detail"] and "connection refused" in agent["detail"]
    assert "CONTROLLER_UNAVAILABLE" in agent["detail"]
    assert not any("ziti-sdk" in ln for ln in lines[: lines.index(first_error)])


HOLD_SCRIPT = """
import os, sys
from monky_deployd.adapters.net.sdk_stderr import SDK_STDERR
SDK_STDERR.hold(start=False)  # a dial before any load: fd 2 is left alone
os.write(2, b"before any load\\n")
assert SDK_STDERR.take() == ""
SDK_STDERR.hold()
os.write(2, b"during a good load\\n")
SDK_STDERR.release()
os.write(2, b"passes straight through\\n")
SDK_STDERR.hold()
os.write(2, b"the sdk complains\\nand again")
words = SDK_STDERR.take()
print("agent: " + words, flush=True)
os.write(2, b"said after the failure\\n")
print("agent summary", flush=True)
"""


def test_held_lines_are_passed_on_taken_or_written_at_exit() -> None:
    proc = subprocess.run(
        (sys.executable, "-c", HOLD_SCRIPT),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines() == [
        "before any load",
        "during a good load",  # a successful call's lines are passed on
        "passes straight through",
        "agent: the sdk complains | and again",  # a failure's lines go into the agent's line
        "agent summary",
        "said after the failure",  # held until exit: after the agent's lines
    ]
