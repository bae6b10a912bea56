"""End to end (issue 40): what the box's policy judged is exactly what runs, through the real CLI,
engine and registry (on both engines: scripts/test.sh runs this file again on the second).

- every compose call runs the revision's judged model (compose.judged.json), never its compose
  file and .env read again: a .env and compose file changed after the judge change nothing;
- a revision an older agent staged (no model) is judged by today's policy when it is run again;
- a release whose .env sets a variable compose reads as its own setting is refused by name;
- a bind below a directory a container can write is refused: a container swapping a link there
  as fast as it can, round after round, never gets the host's /etc mounted."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-judged-1") as lab:
        yield lab


def bind_bundle(lab: Lab, env_template: str, source: str = "/${SRC}") -> dict[str, Any]:
    """A bundle whose web binds ``source`` (a source led by a variable is BUNDLE_RELATIVE_BIND:
    the default reads SRC without its leading slash)."""
    return lab.bundle(env_template=env_template, web={"volumes": [f"{source}:/x"]})


def test_compose_runs_the_judged_model_not_the_files_read_again(lab: Lab) -> None:
    good = lab.binds / "good"
    good.mkdir()
    env = f"DB_PASSWORD=${{DB_PASSWORD}}\nSRC={str(good).lstrip('/')}\n"
    lab.estate.tenancy.set_desired("r1", bind_bundle(lab, env))
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    where = lab.state_dir / "revisions" / "r1"
    names = sorted(p.name for p in where.iterdir())
    assert names == [
        *(".env", "compose.judged.json", "compose.labels.yaml", "compose.pinned.yaml"),
        *("compose.yaml", "paths.held.json", "release.json"),
    ]
    assert oct((where / "compose.judged.json").stat().st_mode & 0o777) == "0o600"
    model = json.loads((where / "compose.judged.json").read_text())
    assert model["services"]["web"]["volumes"][0]["source"] == str(good)
    assert [m["Source"] for m in lab.mounts()] == [str(good)]
    # the revision's compose file and .env rewritten (as a re-read would see them), then the
    # container removed: the restore runs the judged model, not what the files say now
    (where / ".env").write_text("DB_PASSWORD=x\nSRC=/etc\nCOMPOSE_DISABLE_ENV_FILE=1\n")
    (where / "compose.yaml").write_text("services: {web: {image: nope, volumes: ['/etc:/x']}}\n")
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), check=True, capture_output=True)
    again = lab.tick()
    assert again.rc == 0, again.stdout + again.stderr
    assert [m["Source"] for m in lab.mounts()] == [str(good)]


def test_a_revision_staged_without_a_model_is_judged_when_it_runs_again(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    model = lab.state_dir / "revisions" / "r1" / "compose.judged.json"
    model.unlink()  # as an agent before issue 40 staged it
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), check=True, capture_output=True)
    restored = lab.tick()
    assert restored.rc == 0, restored.stdout + restored.stderr
    assert model.is_file() and "web" in lab.containers()
    # today's policy refuses what it asks: the restore is refused, nothing runs it
    model.unlink()
    staged = lab.state_dir / "revisions" / "r1" / "compose.yaml"
    staged.write_text(staged.read_text().replace("network_mode: none", "network_mode: host"))
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), check=True, capture_output=True)
    refused = lab.tick()
    assert refused.rc != 0
    assert any(e.get("code") == "POLICY_REFUSED" for e in refused.errors), refused.stdout
    assert "web" not in lab.containers() and not model.exists()


@pytest.mark.parametrize("name", ["COMPOSE_DISABLE_ENV_FILE", "COMPOSE_PROFILES", "DOCKER_CONTEXT"])
def test_a_release_setting_composes_own_variables_is_refused_by_name(lab: Lab, name: str) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    before = lab.containers()
    env = f"{name}=1\nDB_PASSWORD=${{DB_PASSWORD}}\nSRC={str(lab.binds).lstrip('/')}\n"
    lab.estate.tenancy.set_desired("r2", bind_bundle(lab, env, "/${SRC:-etc}"))
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["code"] == "ENV_COMPOSE_SETTING"
    assert name in run.errors[0]["message"]
    assert lab.containers() == before
    assert not (lab.state_dir / "revisions" / "r2").exists()


def test_a_container_swapping_a_link_on_the_way_never_gets_etc_mounted(
    lab: Lab, busybox_image: str
) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    area, safe = lab.binds / "area", lab.binds / "safe"
    (area / "x").mkdir(parents=True)
    (safe / "x").mkdir(parents=True)
    swapper = f"swapper-{uuid.uuid4().hex[:8]}"
    loop = "while :; do rm -rf /area/x; ln -s /etc /area/x; rm -f /area/x; mkdir /area/x; done"
    subprocess.run(
        ("docker", "run", "-d", "--name", swapper, "--network", "none",
         "-v", f"{area}:/area", busybox_image, "sh", "-c", loop),
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        codes = []
        for n in range(2):  # each round a new revision binding the swapped path, then a safe one
            lab.estate.tenancy.set_desired(f"r{2 * n + 2}", bind_bundle(lab, "A=1\n", f"{area}/x"))
            run = lab.tick()
            assert run.rc == 5, run.stdout + run.stderr
            codes.append(run.summary["code"])
            assert "/etc" not in [m["Source"] for m in lab.mounts()]
            lab.estate.tenancy.set_desired(f"r{2 * n + 3}", bind_bundle(lab, "A=1\n", f"{safe}/x"))
            run = lab.tick()
            assert run.rc == 0, run.stdout + run.stderr
            assert [m["Source"] for m in lab.mounts()] == [str(safe / "x")]
        # refused for the writer above it, or (the link caught at the judge) for reaching /etc
        assert set(codes) <= {"POLICY_SWAPPABLE_PATH", "POLICY_PROTECTED_PATH"}, codes
        assert "POLICY_SWAPPABLE_PATH" in codes
    finally:
        subprocess.run(("docker", "rm", "-f", swapper), capture_output=True, check=False)


def test_a_link_swapped_by_the_previous_revisions_own_container_is_refused(lab: Lab) -> None:
    """The attack as found: r1's container writes in an allowed root and swaps a link there
    between r2's judge and its up; r2's bind below what r1 writes is refused, whatever the
    link says at the judge."""
    area = lab.binds / "area"
    (area / "x").mkdir(parents=True)
    loop = "while :; do rm -rf /area/x; ln -s /etc /area/x; rm -f /area/x; mkdir /area/x; done"
    r1 = lab.bundle(web={"volumes": [f"{area}:/area"], "command": ["sh", "-c", loop]})
    lab.estate.tenancy.set_desired("r1", r1)
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    before = lab.containers()
    r2 = lab.bundle(web={"volumes": [f"{area}/x:/x"]})  # r1's web writes area until replaced
    lab.estate.tenancy.set_desired("r2", r2)
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["code"] in ("POLICY_SWAPPABLE_PATH", "POLICY_PROTECTED_PATH")
    detail = run.errors[0]["detail"]
    mine = f"{area}/x lies in {area}, which container {lab.project}-web-1 can write"
    assert mine in detail or "reaches /etc" in detail, detail
    assert lab.containers() == before
    assert "/etc" not in [m["Source"] for m in lab.mounts()]
