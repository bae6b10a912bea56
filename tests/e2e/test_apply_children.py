"""The docker processes an apply starts, counted (issue 15: an apply's cost beyond compose's
own). A recording ``docker.binary`` notes every child; the engine's facts come from its API.

- an apply runs exactly ``compose pull``, ``compose config --hash`` and ``compose up``: the
  pre-flight asks the engine (``GET /info``), not ``docker info``; the commit takes Compose's
  version from the containers its ``up`` created (their ``com.docker.compose.version`` label);
- an apply whose ``up`` creates no container (a new revision, nothing changed) still refreshes
  Compose's version, from ``docker compose version --short``;
- either way ``host.json`` holds what the CLI and the engine say.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    for i, template in enumerate(("LOG_LEVEL=one\n", "LOG_LEVEL=two\n", "LOG_LEVEL=two\n")):
        box.estate.tenancy.set_desired(
            f"r{i}", box.bundle(env_template=template, services=("web", "worker"))
        )
        run = box.tick()
        assert run.rc == 0 and run.summary["outcome"] == "applied", run.stdout[-2000:]
        done = children(records)
        apply = ["compose pull", "compose config", "compose up"]
        if i == 0:  # a fresh box: the host facts of its first check-in
            assert done == ["compose version", *apply]
        elif i == 1:  # both containers recreated: their label names the compose
            assert done == apply
        else:  # nothing recreated: no container of this apply to ask
            assert done == [*apply, "compose version"]
        facts = host_facts(box)
        assert facts["compose"] == cli("docker", "compose", "version", "--short")
        assert facts["docker"] == cli("docker", "version", "--format", "{{.Server.Version}}")
