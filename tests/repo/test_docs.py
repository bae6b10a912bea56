"""The documents say what the code does: error codes, exit codes and the tenancy port agree."""

from __future__ import annotations

import re
from pathlib import Path

from monky_deployd import config
from monky_deployd.core import errors
from monky_deployd.core.errors import CATALOGUE, Code

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "monky_deployd"
CODE_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.MULTILINE)
CODE_USE = re.compile(r"\bCode\.([A-Z][A-Z0-9_]+)\b")


def documented_codes() -> set[str]:
    return set(CODE_ROW.findall((ROOT / "OPERATIONS.md").read_text()))


def raised_codes() -> set[str]:
    """Codes named in the agent's source outside the catalogue itself (every raise site names
    its code: ``DeployError`` has no default)."""
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        if path != SRC / "core" / "errors.py":
            found |= set(CODE_USE.findall(path.read_text()))
    return found


def test_every_code_in_the_catalogue_is_documented() -> None:
    missing = {c.value for c in Code} - documented_codes()
    assert not missing, f"codes missing from OPERATIONS.md's tables: {sorted(missing)}"


def test_every_documented_code_is_in_the_catalogue() -> None:
    stale = documented_codes() - {c.value for c in Code} - {"OK"}
    assert not stale, f"OPERATIONS.md documents codes the catalogue lacks: {sorted(stale)}"


def test_every_code_in_the_catalogue_is_used() -> None:
    unused = {c.value for c in Code} - raised_codes()
    assert not unused, f"catalogue codes no module raises (dead): {sorted(unused)}"


def test_every_code_used_is_in_the_catalogue() -> None:
    # a typo such as Code.TOKEN_INVALD fails mypy; this catches one in a string-built name
    assert raised_codes() <= {c.value for c in Code}


def test_the_catalogue_gives_every_code_a_family_and_an_outcome() -> None:
    assert set(CATALOGUE) == set(Code)
    for code in Code:
        assert code.outcome in ("refused", "failed") and code.family


def test_the_scan_sees_codes_from_every_layer() -> None:
    used = raised_codes()
    for sample in (
        "CONFIG_INVALID",
        "ENV_INCOMPLETE",
        "GRANT_SUPERSEDED",
        "REGISTRY_AUTH",
        "DISK_INSUFFICIENT",
        "IDENTITY_NOT_JSON",
        "LEASE_RATE_LIMITED",
    ):
        assert sample in used


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
        value = getattr(errors, name)
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
