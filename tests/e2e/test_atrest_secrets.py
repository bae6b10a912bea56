"""The secrets a rollback learns from the last known good revision's .env at rest (issue 22).

r1 (the LKG) writes two of its secrets to a named volume; both sit in r1's .env on lines the
old learner misread: one followed by an inline comment (``K=${K} # note``), one holding a Unicode
line separator (Compose cuts lines only at ``\\n``; ``str.splitlines`` also at U+2028, ``\\v``,
``\\x85`` ...). The secrets are then rotated, and r2's healthcheck prints the volume's file and
fails: the rollback to r1 learns r1's secrets from its .env at rest. Every journal line, the
report tenancy received, held.json and ``status`` are searched for any run of 8 characters of
them (before the fix: 30 of 30 bytes and 17 of 29 bytes reached the journal and the report).
The real CLI, engine and registry.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab
from tests.e2e.test_secret_sweep import leaked, strings_of

pytestmark = pytest.mark.docker

APP = "envs/env-e2e-01/app"
# a quote, a backslash or a `$` every few characters: in the .env each is escaped, so no run
# of 8 of the line as written is a run of the secret
COMMENTED = 'Zq"ab$cd\\ef"gh$ij\\kl"mn$op"\\$x'
SEPARATED = "Ls-first-part\u2028second-part-xyz"
OTHER = "unrelated-value-of-the-lkg"


def decoded(text: str) -> str:
    """``text`` and, for each line of it that is JSON, every string in it unescaped."""
    out = [text]
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out += strings_of(json.loads(line))
    return "\n".join(out)


def bundle(lab: Lab, compose_service: dict[str, Any]) -> dict[str, Any]:
    manifest = [
        {"name": name, "path": APP, "key": name.lower()}
        for name in ("COMMENTED", "SEPARATED", "OTHER")
    ] + [
        {
            "name": "registry",
            "path": "envs/env-e2e-01/registry",
            "key": "robot",
            "use": "registry-auth",
        }
    ]
    template = (
        "# rendered by the agent: substitutes every ${VAR}\n"
        "COMMENTED=${COMMENTED} # rotated monthly\n"
        "SEPARATED=${SEPARATED}\n"
        "OTHER=${OTHER}\n"
    )
    b = lab.bundle(env_template=template, manifest=manifest)
    doc = yaml.safe_load(b["compose"])
    doc["services"]["web"].update(compose_service)
    doc["services"]["web"]["volumes"] = ["data:/data"]
    doc["volumes"] = {"data": {}}
    b["compose"] = yaml.safe_dump(doc)
    return b


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image) as lab:
        try:
            yield lab
        finally:
            subprocess.run(("docker", "volume", "rm", f"{lab.project}_data"), capture_output=True)


def test_a_rollback_masks_the_lkg_secrets_read_back_from_its_env_at_rest(lab: Lab) -> None:
    bao = lab.estate.bao
    bao.set_secret(APP, {"commented": COMMENTED, "separated": SEPARATED, "other": OTHER})
    writes = {
        "command": [
            "sh",
            "-c",
            'printf "%s\\n%s\\n" "$$COMMENTED" "$$SEPARATED" > /data/lkg; exec sleep 3600',
        ]
    }
    lab.estate.tenancy.set_desired("r1", bundle(lab, writes))
    first = lab.tick()
    assert first.rc == 0, first.stdout
    env_at_rest = (lab.state_dir / "revisions" / "r1" / ".env").read_text()
    assert "# rotated monthly" in env_at_rest and "\u2028" in env_at_rest
    # rotated: this tick's KV values are others, so r1's are known only from its .env at rest
    bao.set_secret(APP, {"commented": "n" * 30, "separated": "s" * 30, "other": "o" * 30})
    failing = {
        "healthcheck": {
            "test": ["CMD-SHELL", "cat /data/lkg; exit 1"],
            "interval": "1s",
            "retries": 1,
        }
    }
    lab.estate.tenancy.set_desired("r2", bundle(lab, failing))
    run = lab.tick("--debug")
    assert run.errors and run.errors[0]["code"] == "VERIFY_UNHEALTHY", run.stdout
    report = lab.estate.tenancy.reports[-1]
    assert report["rollback"] == {"to_revision": "r1", "ok": True}
    # the health output was there to leak: the fault's detail shows the masked file
    assert "***" in json.dumps(run.errors[0]), run.errors[0]
    status = lab.cli("status", "--json")
    haystacks = {
        "journal": decoded(run.stdout + run.stderr),
        "report": decoded(json.dumps(report)),
        "held.json": decoded((lab.state_dir / "held.json").read_text()),
        "status": decoded(status.stdout) + status.stderr,
    }
    leaks = {
        name: {"commented": leaked(COMMENTED, hay), "separated": leaked(SEPARATED, hay)}
        for name, hay in haystacks.items()
    }
    print(f"bytes of the LKG's secrets leaked per path: {leaks}")
    assert not any(n for per in leaks.values() for n in per.values()), leaks
