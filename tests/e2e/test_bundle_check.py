"""End to end (issue 42): ``monky-deployd bundle check`` and a box's tick give the same verdict
and the same violation lines. Hypothesis generates bundles mixing allowed keys and refused
shapes (an added capability, a host namespace, the engine's socket, a relative or ``~`` bind,
another ``env_file``, a service with ``build`` and no ``image``); each is checked offline by
``bundle check`` as the CLI (the lab's config.yaml, the revision it will be published as) and
then applied by a real tick (the real CLI, engine and registry): admitted and applied, or
refused with the same code and the same detail lines."""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import CLI, Lab

pytestmark = pytest.mark.docker

# (key, value) shapes of the web service; "{binds}" is the lab's bind root
ALLOWED = {
    "cap_drop": ("cap_drop", ["NET_RAW"]),
    "labels": ("labels", {"team": "shop"}),
    "bind": ("volumes", ["{binds}/data:/data:ro"]),
    "named": ("volumes", ["cache:/cache"]),
    "read_only": ("read_only", True),
}
REFUSED = {
    "cap_add": ("cap_add", ["SYS_ADMIN"]),
    "pid": ("pid", "host"),
    "socket": ("volumes", ["/var/run/docker.sock:/docker.sock"]),
    "relative": ("volumes", ["./data:/data"]),
    "home": ("volumes", ["~/data:/home-data"]),
    "env_file": ("env_file", ["other.env"]),
}
SHAPES = sorted(ALLOWED) + sorted(REFUSED)


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-check-1") as lab:
        (lab.binds / "data").mkdir()
        yield lab


def bundle_of(lab: Lab, shapes: list[str], build_only: bool) -> dict[str, Any]:
    web: dict[str, Any] = {}
    for name in shapes:
        key, value = {**ALLOWED, **REFUSED}[name]
        if isinstance(value, list):
            value = [str(v).replace("{binds}", str(lab.binds)) for v in value]
            web[key] = [*web.get(key, []), *value]
        else:
            web[key] = value
    top: dict[str, Any] | None = {"volumes": {"cache": {}}} if "named" in shapes else None
    bundle = lab.bundle(web=web, top=top)
    if build_only:
        compose = yaml.safe_load(bundle["compose"])
        compose["services"]["builder"] = {"build": {"context": "."}, "network_mode": "none"}
        bundle["compose"] = yaml.safe_dump(compose)
    return bundle


def bundle_check(lab: Lab, revision: str, bundle: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    path = lab.tmp / f"{revision}.json"
    path.write_text(json.dumps(bundle))
    argv = ("bundle", "check", "-c", str(lab.config_path), "--revision", revision)
    proc = subprocess.run(
        (*CLI, *argv, "--format", "json", str(path)),
        capture_output=True,
        text=True,
        env=lab.env(),
        check=False,
        timeout=120,
    )
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr
    found: dict[str, Any] = json.loads(proc.stdout)
    return proc.returncode, found


@settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    shapes=st.lists(st.sampled_from(SHAPES), unique=True, max_size=4),
    build_only=st.booleans(),
)
@example(shapes=["bind", "cap_drop", "labels"], build_only=False)
@example(shapes=["cap_add", "pid", "socket", "env_file"], build_only=True)
@example(shapes=["named", "relative", "home"], build_only=False)
def test_bundle_check_and_a_tick_give_the_same_verdict_and_lines(
    lab: Lab, shapes: list[str], build_only: bool
) -> None:
    revision = f"r{next(COUNTER)}"
    bundle = bundle_of(lab, shapes, build_only)
    rc, verdict = bundle_check(lab, revision, bundle)
    lab.estate.tenancy.set_desired(revision, bundle)
    tick = lab.tick()
    said = (shapes, build_only, verdict, tick.stdout[-3000:])
    if rc == 0:
        assert verdict["verdict"] == "admitted" and verdict["violations"] == [], said
        assert tick.rc == 0 and tick.summary["outcome"] == "applied", said
        return
    assert tick.rc == 5 and tick.summary["outcome"] == "refused", said
    assert verdict["verdict"] == "refused", said
    assert tick.summary["code"] == verdict["code"], said
    error = tick.errors[0]
    lines = error["detail"].splitlines() or error["message"].splitlines()[1:]
    first = [v["line"] for v in verdict["violations"] if v["stage"] == verdict["stage"]]
    assert lines == first, said  # the tick stops at its first refusal
    assert error["phase"] == verdict["stage"], said
    # every refused shape of the bundle is named, in the stage that refused it
    if any(s in shapes for s in ("relative", "home")):
        assert verdict["code"] == "BUNDLE_RELATIVE_BIND", said
    # ... and so is every other in the same run (issue 47): the policy stage judged them too
    codes = {v["code"] for v in verdict["violations"]}
    if any(s in shapes for s in ("cap_add", "pid", "socket", "env_file")) or build_only:
        assert codes - {"BUNDLE_RELATIVE_BIND"}, said


COUNTER = itertools.count(1)
