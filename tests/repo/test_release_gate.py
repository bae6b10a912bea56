"""scripts/release-gate.sh, run for real: a release tag must equal "v" + __version__ (R19)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GATE = REPO / "scripts" / "release-gate.sh"
INIT = REPO / "src" / "monky_deployd" / "__init__.py"


def _version() -> str:
    match = re.search(r'^__version__ = "([^"]+)"$', INIT.read_text(encoding="utf-8"), re.M)
    assert match, "src/monky_deployd/__init__.py has no __version__ line"
    return match.group(1)


def _gate(*args: str, version_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MONKY_VERSION_FILE"}
    if version_file is not None:
        env["MONKY_VERSION_FILE"] = str(version_file)
    return subprocess.run(
        ["bash", str(GATE), *args], capture_output=True, text=True, env=env, timeout=30
    )


def test_matching_tag_passes() -> None:
    version = _version()
    result = _gate(f"v{version}")
    assert result.returncode == 0, result.stderr
    assert f"matches __version__ {version}" in result.stdout


def test_mismatching_tag_is_refused_naming_both_versions() -> None:
    version = _version()
    major, _, rest = version.partition(".")
    other = f"{int(major) + 1}.{rest}"
    result = _gate(f"v{other}")
    assert result.returncode == 1
    assert f"tag v{other} names version {other}" in result.stderr
    assert f'__version__ = "{version}"' in result.stderr
    assert f"tag the commit v{version}" in result.stderr


def test_version_without_v_prefix_is_refused() -> None:
    result = _gate(_version())
    assert result.returncode == 1
    assert "is not a release tag" in result.stderr


@pytest.mark.parametrize(
    "tag", ["", "v", "release-1", "V0.1.0", "v0.1.0 ", "v0.1.0;true", "v../0.1.0", "vx.y"]
)
def test_malformed_tags_are_refused(tag: str) -> None:
    result = _gate(tag)
    assert result.returncode == 1, result.stdout
    assert "is not a release tag" in result.stderr


def test_missing_argument_is_a_usage_error() -> None:
    result = _gate()
    assert result.returncode == 2
    assert "usage: scripts/release-gate.sh TAG" in result.stderr


def test_prerelease_version_matches_exactly(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text('"""x"""\n\n__version__ = "1.4.0rc2"\n', encoding="utf-8")
    assert _gate("v1.4.0rc2", version_file=init).returncode == 0
    refused = _gate("v1.4.0", version_file=init)
    assert refused.returncode == 1
    assert '__version__ = "1.4.0rc2"' in refused.stderr


def test_unreadable_or_ambiguous_version_file_is_refused(tmp_path: Path) -> None:
    missing = _gate("v0.1.0", version_file=tmp_path / "nope.py")
    assert missing.returncode == 1
    assert "cannot read" in missing.stderr

    none = tmp_path / "none.py"
    none.write_text("VERSION = '0.1.0'\n", encoding="utf-8")
    result = _gate("v0.1.0", version_file=none)
    assert result.returncode == 1
    assert "found 0" in result.stderr

    two = tmp_path / "two.py"
    two.write_text('__version__ = "0.1.0"\n__version__ = "0.2.0"\n', encoding="utf-8")
    result = _gate("v0.1.0", version_file=two)
    assert result.returncode == 1
    assert "found 2" in result.stderr


def test_gate_is_shellcheck_clean() -> None:
    assert subprocess.run(["bash", "-n", str(GATE)], timeout=30).returncode == 0
    shellcheck = shutil.which("shellcheck") or str(REPO / ".venv" / "bin" / "shellcheck")
    result = subprocess.run([shellcheck, str(GATE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout
