"""Session fixtures of the system tier, shared by tests/system/packaging and tests/system/ansible:
the Debian images and the .deb, built once per session (tests/system/debian.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.system.debian import build_deb, ensure_debian_image, ensure_pkgtest_image


@pytest.fixture(scope="session")
def debian_image() -> str:
    """local/debian:bookworm, the bare base (scripts/debian-image.sh)."""
    return ensure_debian_image()


@pytest.fixture(scope="session")
def pkg_image() -> str:
    """The base plus the package's dependencies, curl and systemd (not running)."""
    return ensure_pkgtest_image()


@pytest.fixture(scope="session")
def built_deb() -> Path:
    """packaging/build-deb.sh, run once per session (the venv is built in the bookworm image)."""
    return build_deb()
