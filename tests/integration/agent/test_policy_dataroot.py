"""The engine's own data root is a protected path wherever it was moved: the local policy asks
the engine (``GET /info``'s ``DockerRootDir``), here the suite's second engine, whose
``data-root`` is not /var/lib/docker. A release binding it, through the real ``docker compose
config``, is refused as a protected path, whatever ``bind_roots`` allows; with an engine that
does not answer the fixed paths still hold (and preflight refuses the apply)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from monky_deployd.agent import policy
from monky_deployd.config import Config
from monky_deployd.core.errors import Code
from monky_deployd_testkit.engines import SECOND_SOCK, second_available

pytestmark = pytest.mark.docker


def config(tmp: Path, host: str, bind_root: str) -> Config:
    return Config.model_validate(
        {
            "env": "env-test",
            "state_dir": str(tmp / "state"),
            "locks": {"dir": str(tmp / "locks")},
            "docker": {"host": host},
            "policy": {"allow": {"bind_roots": [bind_root]}},
        }
    )


def test_a_moved_data_root_is_protected(tmp_path: Path) -> None:
    second_available()
    root = subprocess.run(
        ("docker", "--host", SECOND_SOCK, "info", "--format", "{{.DockerRootDir}}"),
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert root and not root.startswith("/var/lib/docker"), root
    parent = str(Path(root).parent)
    cfg = config(tmp_path, SECOND_SOCK, parent)
    assert root in policy.protected(cfg)
    doc = {"services": {"web": {"image": "busybox", "volumes": [f"{parent}:/host"]}}}
    release = (yaml.safe_dump(doc), "")
    found, _, _ = policy.judge(cfg, tmp_path / "docker", "p", tmp_path / "r1", release)
    assert [(v.code, v.key) for v in found] == [(Code.POLICY_PROTECTED_PATH, "volumes")]
    assert root in found[0].line()

    down = config(tmp_path, f"unix://{tmp_path}/no-engine.sock", parent)
    assert root not in policy.protected(down) and "/var/lib/docker" in policy.protected(down)
