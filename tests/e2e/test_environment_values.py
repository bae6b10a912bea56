"""End to end (issue 47): a secret or config read from ``environment:`` runs on a box, through
the real CLI, engine and registry (on both engines: scripts/test.sh runs this file again on the
second). Compose runs the judged model with ``--env-file /dev/null`` and a bare environment, so
the model carries each value compose resolved when it was judged, under a variable of the
agent's own name, and ``up`` hands compose exactly those: the container reads the judged value
(a ``$`` in it kept); a variable the release's .env does not set is refused before anything
runs, with compose's own words."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker

PASSWORD = "pw-$HOME-${X}-$$-'q' 47"  # every `$` form compose could read again


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password=PASSWORD) as lab:
        yield lab


def reads(lab: Lab, env_template: str) -> dict[str, Any]:
    """A bundle whose web reads secret ``db`` and config ``cf`` from ``environment:``."""
    return lab.bundle(
        env_template=env_template,
        web={"secrets": ["db"], "configs": [{"source": "cf", "target": "/cf"}]},
        top={
            "secrets": {"db": {"environment": "DB_PASSWORD"}},
            "configs": {"cf": {"environment": "CF_TEXT"}},
        },
    )


def cat(lab: Lab, path: str) -> str:
    return subprocess.run(
        ("docker", "exec", lab.containers()["web"], "cat", path),
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def test_a_secret_and_a_config_read_from_environment_reach_the_container(lab: Lab) -> None:
    env = "DB_PASSWORD=${DB_PASSWORD}\nCF_TEXT='conf $$ text'\n"
    lab.estate.tenancy.set_desired("r1", reads(lab, env))
    run = lab.tick()
    assert run.rc == 0, run.stdout + run.stderr
    assert cat(lab, "/run/secrets/db") == PASSWORD
    assert cat(lab, "/cf") == "conf $$ text"  # single-quoted: compose reads it as written
    model_path = lab.state_dir / "revisions" / "r1" / "compose.judged.json"
    model = json.loads(model_path.read_text())
    names = {model["secrets"]["db"]["environment"], model["configs"]["cf"]["environment"]}
    assert names == {"MONKY_DEPLOYD_VALUE_1", "MONKY_DEPLOYD_VALUE_2"}
    assert sorted(model["x-monky-deployd-values"]) == sorted(names)
    # the container removed: the restore's up hands compose the same judged values again
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), check=True, capture_output=True)
    again = lab.tick()
    assert again.rc == 0, again.stdout + again.stderr
    assert cat(lab, "/run/secrets/db") == PASSWORD


def test_a_variable_the_env_does_not_set_is_refused_before_anything_runs(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", reads(lab, "DB_PASSWORD=${DB_PASSWORD}\n"))
    run = lab.tick()
    assert run.rc != 0, run.stdout + run.stderr
    assert lab.containers() == {}
    error = run.errors[0]
    assert error["code"] == "POLICY_UNJUDGED", error
    assert "required variable CF_TEXT is missing a value" in error["message"], error
    assert PASSWORD not in run.stdout + run.stderr


def test_a_value_too_large_for_composes_environment_is_refused_before_anything_runs(
    lab: Lab,
) -> None:
    """A config read from ``environment:`` whose value is beyond what one variable of a
    process's environment may hold (Linux: 128 KiB a string): ``up`` could not even start
    compose, so it is refused in the policy phase with ENV_TOO_LARGE, nothing run."""
    big = "c" * (200 * 1024)
    lab.estate.tenancy.set_desired(
        "r1", reads(lab, f"DB_PASSWORD=${{DB_PASSWORD}}\nCF_TEXT={big}\n")
    )
    run = lab.tick()
    assert run.rc != 0, run.stdout + run.stderr
    assert lab.containers() == {}
    error = run.errors[0]
    assert (error["code"], error["phase"]) == ("ENV_TOO_LARGE", "policy"), error
    assert "configs.cf.environment reads a value of" in error["message"], error
    assert big[:64] not in run.stdout + run.stderr


def test_a_service_variable_left_for_up_to_resolve_is_two_readings(lab: Lab) -> None:
    """The attack on issue 47: a service's ``environment: [MONKY_DEPLOYD_VALUE_1]`` is judged
    as no value (the judge's compose has no such variable) and ``up``, handed the secret's
    value under that name, put the secret into the container's environment: compose's reading
    (before the model is written and before ``up``) runs with ``up``'s environment, so the
    difference is refused (POLICY_TWO_READINGS) before anything runs, the value masked."""
    bundle = lab.bundle(
        env_template="DB_PASSWORD=${DB_PASSWORD}\n",
        web={"secrets": ["db"], "environment": ["MONKY_DEPLOYD_VALUE_1"]},
        top={"secrets": {"db": {"environment": "DB_PASSWORD"}}},
    )
    lab.estate.tenancy.set_desired("r1", bundle)
    run = lab.tick()
    assert run.rc != 0, run.stdout + run.stderr
    assert lab.containers() == {}
    error = run.errors[0]
    assert (error["code"], error["phase"]) == ("POLICY_TWO_READINGS", "policy"), error
    assert "MONKY_DEPLOYD_VALUE_1" in error["detail"], error
    assert PASSWORD not in run.stdout + run.stderr
