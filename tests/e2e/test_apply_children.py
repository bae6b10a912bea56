"""The docker processes an apply starts, counted (issue 15: an apply's cost beyond compose's
own). A recording ``docker.binary`` notes every child; the engine's facts come from its API.

- an apply runs exactly ``compose config --format json`` (the local policy's reading of the
  release, issue 28, which also gives the labels' config digests: no ``config --hash``, issue
  29), compose's reading of the judged model's bytes before they are written, ``compose pull``,
  compose's reading of the files ``up`` runs right before it (issue 45: one reading, each a
  ``compose config``) and ``compose up``: the
  pre-flight asks the engine (``GET /info``), not ``docker info``; the commit keeps the cached
  Compose version when the containers its ``up`` created confirm it (their
  ``com.docker.compose.version`` label);
- an apply whose ``up`` creates no container (a new revision, nothing changed), or whose
  containers' label does not match the cache (a new compose, a suffixed build), still asks
  ``docker compose version --short``;
- either way ``host.json`` holds what the CLI and the engine say.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.core.wire.checkin import HostFacts
from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker

WRAPPER = """#!/bin/sh
# notes the words of every docker child of the agent (NUL-separated, one file each), runs docker
printf '%s\\0' "$@" > "{records}/$(date +%s%N)-$$"
exec docker "$@"
"""


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[tuple[Lab, Path]]:
    records = tmp_path / "children"
    records.mkdir()
    wrapper = tmp_path / "docker-recording"
    wrapper.write_text(WRAPPER.format(records=records))
    wrapper.chmod(0o755)
    with Lab(tmp_path, registry, web_image, db_password="x") as lab:
        lab.write_config(docker={"binary": str(wrapper)})
        yield lab, records


def children(records: Path) -> list[str]:
    """What each docker child did, in order; its records removed."""
    done: list[str] = []
    for path in sorted(records.iterdir()):
        words = path.read_bytes().split(b"\0")[:-1]
        path.unlink()
        argv = [w.decode() for w in words]
        if argv[:1] != ["compose"]:
            done.append(" ".join(argv[:2]))
        elif "version" in argv:
            done.append("compose version")
        else:
            verb = next(w for w in argv if w in ("pull", "up", "config", "down"))
            done.append(f"compose {verb}")
    return done


def host_facts(lab: Lab) -> dict[str, str]:
    facts = json.loads((lab.state_dir / "host.json").read_text())
    assert isinstance(facts, dict)
    return facts


def cli(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def test_an_apply_runs_only_compose_and_still_knows_the_versions(
    lab: tuple[Lab, Path],
) -> None:
    box, records = lab
    compose = cli("docker", "compose", "version", "--short")
    # the policy's reading, the model's bytes read back, the pull, the files up runs read back
    # right before it (issue 45: one reading), the up
    apply = ["compose config", "compose config", "compose pull", "compose config", "compose up"]
    steps = (
        # (.env template, host.json's compose before the tick or None, the children expected)
        ("LOG_LEVEL=one\n", None, ["compose version", *apply]),  # a fresh box's first check-in
        ("LOG_LEVEL=two\n", None, apply),  # both recreated: their label confirms the cache
        ("LOG_LEVEL=two\n", None, [*apply, "compose version"]),  # none recreated: nothing to ask
        # a cache the label does not confirm (a compose upgraded since; a suffixed build's
        # --short): the CLI is asked
        ("LOG_LEVEL=three\n", "0.0.1", [*apply, "compose version"]),
        ("LOG_LEVEL=four\n", f"{compose}-distro.1", [*apply, "compose version"]),
    )
    for i, (template, cached, expected) in enumerate(steps):
        if cached is not None:
            facts = host_facts(box)
            StateDir(box.state_dir).write_host_facts(
                HostFacts(hostname=facts["hostname"], docker=facts["docker"], compose=cached)
            )
        box.estate.tenancy.set_desired(
            f"r{i}", box.bundle(env_template=template, services=("web", "worker"))
        )
        run = box.tick()
        assert run.rc == 0 and run.summary["outcome"] == "applied", run.stdout[-2000:]
        assert children(records) == expected, f"apply {i}"
        facts = host_facts(box)
        assert facts["compose"] == compose
        assert facts["docker"] == cli("docker", "version", "--format", "{{.Server.Version}}")
