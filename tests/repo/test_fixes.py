"""OPERATIONS.md's fix for a code is the hint the agent prints for it (issue 36): for every code
whose fix is one command (``core.commands.fixes.DOCUMENTED``), the "what to check" cell of its row
starts with exactly that command, as the agent prints it on a box laid out by the package. The
system test (tests/system/test_seats.py) compares the same cells with the hints printed on such a
box."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from monky_deployd.core.commands import fixes
from monky_deployd.core.errors import Code

ROOT = Path(__file__).resolve().parents[2]


def fix_cell(code: Code, text: str | None = None) -> str:
    """The "what to check" cell (the last) of ``code``'s row in OPERATIONS.md's error tables."""
    text = (ROOT / "OPERATIONS.md").read_text() if text is None else text
    rows = re.findall(rf"^\| `{code.value}` \|.*\| (.*) \|$", text, re.MULTILINE)
    assert len(rows) == 1, f"{code}: {len(rows)} rows in OPERATIONS.md"
    return str(rows[0])


def documented_fix(code: Code) -> str:
    """The command the cell starts with (its first backticked span, backticks included)."""
    cell = fix_cell(code)
    found = re.match(r"`[^`]+`", cell)
    assert found, f"{code}'s fix in OPERATIONS.md does not start with a command: {cell!r}"
    return found.group(0)


@pytest.mark.parametrize("code", sorted(fixes.DOCUMENTED))
def test_the_documented_fix_is_the_printed_hint(code: Code) -> None:
    assert documented_fix(code) == fixes.DOCUMENTED[code]


def test_a_cell_that_names_another_command_fails() -> None:
    text = "| `STATE_UNWRITABLE` | m | `chown -R root /var/lib/monky-deployd` |\n"
    cell = fix_cell(Code.STATE_UNWRITABLE, text)
    assert not cell.startswith(fixes.DOCUMENTED[Code.STATE_UNWRITABLE])


def test_the_raise_sites_print_the_documented_command() -> None:
    src = ROOT / "src" / "monky_deployd"
    assert "fixes.state_chown(" in (src / "adapters" / "box" / "state" / "owner.py").read_text()
    assert "fixes.identity_access(" in (src / "adapters" / "net" / "identity.py").read_text()
