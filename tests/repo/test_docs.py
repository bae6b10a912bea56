"""The documents say what the code does: error codes, exit codes and the tenancy port agree."""

from __future__ import annotations

import re
from pathlib import Path

from monky_deployd import cli, config
from monky_deployd.core import pullerrors

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "monky_deployd"
CODE_IN_SRC = re.compile(r'(?:\bcode=|default_code = )"([A-Z][A-Z0-9_]+)"')
CODE_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.MULTILINE)


def emitted_codes() -> set[str]:
    codes: set[str] = set(pullerrors.MEANING)
    for path in SRC.rglob("*.py"):
        codes |= set(CODE_IN_SRC.findall(path.read_text()))
    return codes


def documented_codes() -> set[str]:
    return set(CODE_ROW.findall((ROOT / "OPERATIONS.md").read_text()))


def test_the_scan_finds_codes_from_every_layer() -> None:
    codes = emitted_codes()
    for sample in (
        "CONFIG_INVALID",
        "ENV_INCOMPLETE",
        "GRANT_SUPERSEDED",
        "REGISTRY_AUTH",
        "DISK_INSUFFICIENT",
        "IDENTITY_NOT_JSON",
        "LEASE_RATE_LIMITED",
    ):
        assert sample in codes


def test_every_code_the_agent_emits_is_documented() -> None:
    missing = emitted_codes() - documented_codes()
    assert not missing, f"codes missing from OPERATIONS.md's tables: {sorted(missing)}"


def test_every_documented_code_exists() -> None:
    stale = documented_codes() - emitted_codes() - {"OK"}
    assert not stale, f"OPERATIONS.md documents codes the agent never emits: {sorted(stale)}"


def test_exit_codes_are_documented() -> None:
    text = (ROOT / "OPERATIONS.md").read_text()
    for name in (
        "EXIT_OK",
        "EXIT_FAILED",
        "EXIT_USAGE",
        "EXIT_CONFIG",
        "EXIT_LOCKED",
        "EXIT_REFUSED",
    ):
        value = getattr(cli, name)
        assert re.search(rf"^\| {value} \|", text, re.MULTILINE), f"exit code {value} ({name})"


def test_tenancy_port_agrees_everywhere() -> None:
    port = str(config.TenancyCfg().port)
    assert port == "443"
    places = {
        "packaging/install.sh": re.compile(r"^DEPLOYD_TENANCY_PORT=(\d+)$", re.MULTILINE),
        "ansible/roles/monky_deployd/defaults/main.yml": re.compile(
            r"^monky_deployd_tenancy_port: (\d+)", re.MULTILINE
        ),
        "packaging/config.example.yaml": re.compile(r"port: (\d+)"),
        "PROTOCOL.md": re.compile(r"`tenancy\.monky\.ziti:(\d+)`"),
        "OPERATIONS.md": re.compile(r"tenancy\.monky\.ziti:(\d+)"),
    }
    for rel, pattern in places.items():
        path = ROOT / rel
        assert path.exists(), rel
        found = pattern.findall(path.read_text())
        assert found, f"{rel}: no tenancy port found"
        if rel.endswith("config.example.yaml"):
            found = found[:1]  # the tenancy block comes first; openbao's 8200 follows
        assert set(found) == {port}, f"{rel} says {found}, the config model says {port}"
