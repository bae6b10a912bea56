"""Fixtures of the packaging tests: a package registry per test (images and the .deb are
tests/system/conftest.py's, shared with the Ansible suite)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.system.debian import PackageRegistry


@pytest.fixture
def registry_server(built_deb: Path) -> Iterator[PackageRegistry]:
    with PackageRegistry() as server:
        yield server
