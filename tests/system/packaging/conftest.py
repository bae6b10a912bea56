"""Session fixtures of the packaging tests: the test image, the built .deb, a registry server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.system.packaging.lab import RegistryServer, build_deb, ensure_test_image


@pytest.fixture(scope="session")
def pkg_image() -> str:
    return ensure_test_image()


@pytest.fixture(scope="session")
def built_deb() -> Path:
    """packaging/build-deb.sh, run once per session (the venv is built in the bookworm image)."""
    return build_deb()


@pytest.fixture
def registry_server(built_deb: Path) -> Iterator[RegistryServer]:
    server = RegistryServer()
    try:
        yield server
    finally:
        server.close()
