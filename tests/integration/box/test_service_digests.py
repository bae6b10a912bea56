"""The labels' config digests (``core.records.reasons.service_digests``, from the ``docker compose
config --format json`` the local policy already runs) against compose's own hash (``docker
compose config --hash``, the process an apply no longer runs): for generated pairs of a
release, a service's digest moves exactly when compose's hash of it moves. Real compose (no
engine needed); a few examples, each four compose processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters.box.docker import composeconfig
from monky_deployd.adapters.box.docker.compose import Compose
from monky_deployd.adapters.box.state.state import COMPOSE_FILE, ENV_FILE, MODEL_FILE
from monky_deployd.config import DockerCfg
from monky_deployd.core.admission import artifact
from monky_deployd.core.records import reasons

pytestmark = pytest.mark.docker

KEY = b"d" * 32
NO_DOCKER_DIR = Path("/nonexistent-docker-dir")

# web's fields a revision may change, each with two values: those compose's hash covers and
# those it leaves out (build, pull_policy, depends_on, profiles, deploy.replicas)
CHOICES: dict[str, tuple[Any, Any]] = {
    "image": ("busybox:1", "busybox:2"),
    "command": (["sleep", "1"], ["sleep", "2"]),
    "environment": ({"A": "1", "B": "${X}"}, {"A": "2", "B": "${X}"}),
    "ports": (["8080:80"], ["8090:80"]),
    "labels": ({"team": "a"}, {"team": "b"}),
    "volumes": (["./data:/data"], ["./data:/other"]),
    "env_file": (None, [".env"]),
    "build": (None, {"context": "."}),
    "pull_policy": ("missing", "always"),
    "depends_on": (None, ["db"]),
    "profiles": (None, ["extra"]),
    "deploy": ({"replicas": 1}, {"replicas": 3}),
}
picks = st.fixed_dictionaries({k: st.booleans() for k in CHOICES})


def release(pick: dict[str, bool], x: str) -> tuple[str, str]:
    web: dict[str, Any] = {}
    for name, flip in pick.items():
        value = CHOICES[name][flip]
        if value is not None:
            web[name] = value
    doc = {"services": {"web": web, "db": {"image": "busybox:1", "environment": {"X": "${X}"}}}}
    return yaml.safe_dump(doc), f"X={x}\n"


def both(project_dir: Path, text: tuple[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(our digests, compose's hashes) of a release staged in ``project_dir``."""
    project_dir.mkdir(parents=True, exist_ok=True)
    (project_dir / COMPOSE_FILE).write_text(text[0])
    (project_dir / ENV_FILE).write_text(text[1])
    config, _ = composeconfig.effective(DockerCfg(), NO_DOCKER_DIR, "p", project_dir, text)
    (project_dir / MODEL_FILE).write_text(artifact.text(config))  # what compose runs
    ours = reasons.service_digests(KEY, config, text[1])
    theirs = Compose(DockerCfg(), NO_DOCKER_DIR, "p", project_dir).config_hashes()
    assert theirs is not None
    return ours, theirs


@pytest.mark.parametrize("change", [*CHOICES, "X"])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=picks)
def test_a_digest_moves_exactly_when_composes_own_hash_moves(
    tmp_path_factory: pytest.TempPathFactory, a: dict[str, bool], change: str
) -> None:
    """One change at a time from a generated release (``X``: a value of the .env that db's
    environment and web's ``${X}`` read)."""
    root = tmp_path_factory.mktemp("digests")
    b = {**a, change: not a[change]} if change in CHOICES else a
    ours_a, theirs_a = both(root / "r1", release(a, "1"))
    ours_b, theirs_b = both(root / "r1", release(b, "2" if change == "X" else "1"))
    assert set(theirs_a) <= set(ours_a) and set(theirs_b) <= set(ours_b)
    for service in set(theirs_a) & set(theirs_b):
        same = theirs_a[service] == theirs_b[service]
        assert (ours_a[service] == ours_b[service]) == same, (service, a, change)


def test_a_new_revision_directory_alone_moves_neither_without_relative_paths(
    tmp_path: Path,
) -> None:
    """r1 and r2 hold the same release: a service with no relative path keeps both its hash
    and its digest; one with a relative bind (``./data``, resolved under the revision's own
    directory) moves in both."""
    pick = dict.fromkeys(CHOICES, False)
    text = release({**pick, "env_file": True}, "1")
    ours_1, theirs_1 = both(tmp_path / "r1", text)
    ours_2, theirs_2 = both(tmp_path / "r2", text)
    assert theirs_1["db"] == theirs_2["db"] and ours_1["db"] == ours_2["db"]
    assert theirs_1["web"] != theirs_2["web"] and ours_1["web"] != ours_2["web"]
