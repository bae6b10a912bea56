"""Fixtures shared by the end-to-end test files."""

from __future__ import annotations

import pytest

from monky_deployd_testkit.dockerlab import Registry


@pytest.fixture(scope="module")
def web_image(registry: Registry, busybox_image: str) -> str:
    """busybox pushed as env-e2e-01/web:1.0 (once per test file): the default lab's image."""
    return registry.push(busybox_image, "env-e2e-01/web", "1.0")
