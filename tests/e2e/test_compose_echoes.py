"""Values compose echoes back in another shape than the secret's own, kept out of the journal
and the report. The real CLI, engine and registry.

The registry password is a secret of the tick before compose reads the release (the policy
phase), not only after it: a hostile manifest may name the registry credential's KV key as a
variable too, so the whole ``user:password`` lands in the .env, and compose's error on the
release (``ports: ["${REG}"]`` splits it at the colon: ``invalid containerPort: <password>``)
would show a short password alone, which the masker knew only as part of the whole value (no
run of 8 characters of it). A secret of digits compose reads as a port comes back as the
number in its warning on ``mode: host`` (``0004711`` -> ``ports[4711/tcp]``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker

REGISTRY = "envs/env-e2e-01/registry"
PASSWORD = "pw1234x"  # 7 characters: masked only as itself, never as a run of the whole


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image) as lab:
        yield lab


def test_a_short_registry_password_compose_echoes_alone_is_masked(lab: Lab) -> None:
    lab.estate.bao.set_secret(REGISTRY, {"robot": f"robot:{PASSWORD}"})
    manifest = [
        {"name": "REG", "path": REGISTRY, "key": "robot"},
        {"name": "registry", "path": REGISTRY, "key": "robot", "use": "registry-auth"},
    ]
    bundle = lab.bundle(env_template="REG=${REG}\n", manifest=manifest, web={"ports": ["${REG}"]})
    lab.estate.tenancy.set_desired("r1", bundle)
    run = lab.tick()
    assert run.rc != 0 and run.summary["code"] == "POLICY_UNJUDGED", run.stdout
    assert "invalid containerPort: ***" in run.stdout, run.stdout
    seen = run.stdout + run.stderr + json.dumps(lab.estate.tenancy.reports)
    assert PASSWORD not in seen, seen


def test_a_pin_compose_reads_as_a_port_is_masked_in_its_warning(lab: Lab) -> None:
    lab.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": "0004711"})
    port = {"target": "${DB_PASSWORD}", "published": "18080", "mode": "host"}
    lab.estate.tenancy.set_desired("r1", lab.bundle(web={"ports": [port]}))
    run = lab.tick()
    (warned,) = run.events("policy.compose_warning")
    assert "ports[***/tcp]" in warned["message"], warned
    seen = run.stdout + run.stderr + json.dumps(lab.estate.tenancy.reports)
    assert "4711" not in seen, seen
