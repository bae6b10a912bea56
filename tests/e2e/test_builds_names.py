"""End to end (issue 45): builds off by default, what a build reads copied, box-wide names and
weights, through the real CLI, engine, compose and registry (on both engines: scripts/test.sh
runs this file again on the second).

- a ``build:`` is refused on a box that does not allow it (POLICY_BUILD), nothing changed;
- an allowed build whose context a container swaps for a link to the agent's state dir right
  after the agent copied it builds the copy: the state dir never lands in an image;
- a built image named as another project's containers' image is refused (POLICY_FOREIGN_TAG);
- the image GC keeps another project's rollback image a release of this project named;
- ``cpu_shares: 262144`` and ``build.network: container:<another app>`` are refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry, build_image, image_exists, remove_image
from monky_deployd_testkit.lab import Lab, Run

pytestmark = pytest.mark.docker


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-builds-1") as lab:
        lab.estate.tenancy.set_desired("r1", lab.bundle())
        first = lab.tick()
        assert first.rc == 0, first.stdout + first.stderr
        yield lab


def allow_builds(lab: Lab) -> None:
    lab.write_config(policy={"allow": {"bind_roots": [str(lab.binds)], "build": True}})


def refused(lab: Lab, bundle: dict[str, Any], revision: str = "r2") -> Run:
    """Publish ``bundle`` as ``revision`` and tick: refused in the policy phase, nothing on the
    box changed."""
    before, pulls = lab.containers(), lab.pulls()
    revisions = sorted(p.name for p in (lab.state_dir / "revisions").iterdir())
    lab.estate.tenancy.set_desired(revision, bundle)
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["outcome"] == "refused"
    assert run.errors[0]["phase"] == "policy", run.errors[0]["message"]
    assert lab.containers() == before
    assert lab.pulls() == pulls
    assert sorted(p.name for p in (lab.state_dir / "revisions").iterdir()) == revisions
    return run


def lines(run: Run) -> list[str]:
    detail: str = run.errors[0]["detail"]
    return detail.splitlines()


def context_dir(lab: Lab) -> Path:
    """A build context under the lab's bind root (the classic builder here reads a Dockerfile
    from the context; ``dockerfile_inline`` is BuildKit's)."""
    ctx = lab.binds / "ctx"
    ctx.mkdir()
    (ctx / "marker").write_text("the judged context\n")
    (ctx / "Dockerfile").write_text(f"FROM {lab.image}\nCOPY . /ctx/\n")
    return ctx


def built_name(lab: Lab) -> str:
    """This project's own name for what it builds (under the bundle's registry host, the only
    registry a bundle may name)."""
    return f"{lab.registry.host}/{lab.project}/web:built"


def other_name(lab: Lab, tag: str) -> str:
    """Another app's image name, local only."""
    return f"{lab.registry.host}/monky-other-{uuid.uuid4().hex[:8]}/app:{tag}"


def build_of(lab: Lab, ctx: Path, **extra: Any) -> dict[str, Any]:
    return {
        "image": built_name(lab),
        "build": {"context": str(ctx), "dockerfile": "Dockerfile", **extra},
        "pull_policy": "build",
    }


def test_a_build_is_refused_unless_the_box_allows_it(lab: Lab) -> None:
    run = refused(lab, lab.bundle(web=build_of(lab, context_dir(lab))))
    assert run.summary["code"] == "POLICY_BUILD"
    got = lines(run)
    assert any(
        ln.startswith("service web: build builds an image on this box")
        and "allow with policy.services.web.build: true" in ln
        and "write instead: build the image in the release pipeline" in ln
        for ln in got
    ), got
    assert not image_exists(built_name(lab))


def swapping_docker(lab: Lab, ctx: Path) -> None:
    """The agent's docker binary, a script that swaps ``ctx`` for a link to the agent's state dir
    (as a container that can write it would) the moment the agent runs ``compose ... up``:
    after the agent's last check of the revision, before compose reads the context."""
    script = lab.tmp / "docker-swapping"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do\n'
        f'  if [ "$a" = up ] && [ ! -L {ctx} ]; then\n'
        f"    mv {ctx} {ctx}.judged && ln -s {lab.state_dir} {ctx}\n"
        "  fi\n"
        "done\n"
        f'exec {shutil.which("docker")} "$@"\n'
    )
    script.chmod(0o755)
    cfg = yaml.safe_load(lab.config_path.read_text())
    docker = {**cfg.get("docker", {}), "binary": str(script)}
    lab.write_config(
        docker=docker, policy={"allow": {"bind_roots": [str(lab.binds)], "build": True}}
    )


def test_a_context_swapped_after_the_last_check_builds_only_the_copy(lab: Lab) -> None:
    """A container of the box can write the context's directory; it swaps the context for a
    link to the agent's state dir right after the agent's last check, as compose starts. The
    build reads the copy the agent made when it staged the revision: the image holds what was
    judged, no file of the state dir."""
    ctx = context_dir(lab)
    swapping_docker(lab, ctx)
    lab.estate.tenancy.set_desired("r2", lab.bundle(web=build_of(lab, ctx)))
    run = lab.tick()
    assert ctx.is_symlink(), "the context was never swapped"
    assert run.rc == 0, run.stdout + run.stderr
    copy = lab.state_dir / "revisions" / "r2" / "build" / "0" / "context"
    assert (copy / "marker").read_text() == "the judged context\n"
    model = (lab.state_dir / "revisions" / "r2" / "compose.judged.json").read_text()
    assert str(copy) in model and f'"{ctx}"' not in model
    listing = subprocess.run(
        ("docker", "run", "--rm", built_name(lab), "ls", "-A", "/ctx"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(listing) == ["Dockerfile", "marker"], listing
    remove_image(built_name(lab))


def test_a_tag_another_projects_containers_run_is_refused(lab: Lab) -> None:
    """The other app's container was created from ``other-<x>:1``; a release that builds that
    name would move the tag under it."""
    allow_builds(lab)
    other = f"monky-other-{uuid.uuid4().hex[:8]}"
    name = other_name(lab, "1")
    subprocess.run(("docker", "tag", lab.image, name), check=True, capture_output=True)
    subprocess.run(
        ("docker", "create", "--name", other, "--label", f"com.docker.compose.project={other}",
         name, "true"),
        check=True,
        capture_output=True,
    )  # fmt: skip
    try:
        web = {**build_of(lab, context_dir(lab)), "image": name}
        run = refused(lab, lab.bundle(web=web))
        assert run.summary["code"] == "POLICY_FOREIGN_TAG"
        got = lines(run)
        assert any(
            ln.startswith(f"service web: image {name} is the image name project {other} runs")
            and "write instead: an image name of this project's own" in ln
            for ln in got
        ), got
    finally:
        subprocess.run(("docker", "rm", "-f", other), capture_output=True, check=False)
        subprocess.run(("docker", "rmi", name), capture_output=True, check=False)


def test_the_gc_keeps_another_projects_rollback_image(
    lab: Lab, registry: Registry, busybox_image: str
) -> None:
    """Another app's rollback image (local only, no container uses it now) named by a release
    of this project, which is then pruned: the GC removes only what this project pulled."""
    rollback = other_name(lab, "v1")
    other_id = build_image(rollback, f"FROM {busybox_image}\n")
    pulled = [registry.push_unique_image(busybox_image, "env-e2e-01/gc", t) for t in "23"]
    try:
        lab.estate.tenancy.set_desired("r2", lab.bundle(web={"image": rollback,
                                                             "pull_policy": "never"}))  # fmt: skip
        run = lab.tick()
        assert run.rc == 0, run.stdout + run.stderr
        for n, (ref, _) in enumerate(pulled, start=3):
            lab.estate.tenancy.set_desired(f"r{n}", lab.bundle(image=ref))
            run = lab.tick()
            assert run.rc == 0, run.stdout + run.stderr
        revisions = sorted(p.name for p in (lab.state_dir / "revisions").iterdir())
        assert revisions == ["r3", "r4"]  # r2 was pruned, with its release record
        assert image_exists(rollback), "the GC removed another project's rollback image"
        assert image_exists(other_id)
        assert other_id not in {e["image"] for e in run.events("prune.image")}
    finally:
        lab.cleanup()
        subprocess.run(("docker", "rmi", "-f", rollback), capture_output=True, check=False)
        for ref, image_id in pulled:
            subprocess.run(("docker", "rmi", "-f", ref, image_id), capture_output=True, check=False)


def test_a_weight_that_starves_the_others_is_refused(lab: Lab) -> None:
    run = refused(lab, lab.bundle(web={"cpu_shares": 262144}))
    assert run.summary["code"] == "POLICY_REFUSED"
    assert any(
        ln.startswith("service web: cpu_shares 262144 (above 1024")
        and "allow with policy.services.web.cpu_shares: 262144" in ln
        for ln in lines(run)
    ), lines(run)
    lab.write_config(
        policy={
            "allow": {"bind_roots": [str(lab.binds)]},
            "services": {"web": {"cpu_shares": 4096}},
        }
    )
    still = refused(lab, lab.bundle(web={"cpu_shares": 262144}), "r3")
    assert still.summary["code"] == "POLICY_REFUSED"


def test_a_build_in_another_apps_network_namespace_is_refused(
    lab: Lab, request: pytest.FixtureRequest, busybox_image: str
) -> None:
    """``build.network: container:<x>`` is judged as ``network_mode: container:<x>``: another
    container's network namespace (its loopback services), refused whatever is allowed."""
    lab.write_config(
        policy={
            "allow": {
                "bind_roots": [str(lab.binds)],
                "build": True,
                "host_namespaces": ["network"],
                "networks": ["bridge", "default"],
            }
        }
    )
    other = f"monky-other-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ("docker", "create", "--name", other, "--label", f"com.docker.compose.project={other}",
         busybox_image, "sleep", "3600"),  # an image name of its own: the release pulls lab's
        check=True,
        capture_output=True,
    )  # fmt: skip
    request.addfinalizer(
        lambda: subprocess.run(("docker", "rm", "-f", other), capture_output=True, check=False)
    )
    for revision, key, web in (
        ("r2", "build.network", build_of(lab, context_dir(lab), network=f"container:{other}")),
        ("r3", "network_mode", {"network_mode": f"container:{other}"}),
    ):
        run = refused(lab, lab.bundle(web=web), revision)
        assert run.summary["code"] == "POLICY_REFUSED"
        assert any(
            ln.startswith(f"service web: {key} container:{other} (another container's namespace)")
            and "no allowance permits it" in ln
            for ln in lines(run)
        ), lines(run)


def test_a_context_that_cannot_be_copied_as_judged_is_refused_before_any_build(lab: Lab) -> None:
    """A FIFO in the context (a container could make one, and a read of it never ends): the
    copy refuses at the stage, before any pull or build; the running revision keeps running."""
    allow_builds(lab)
    ctx = context_dir(lab)
    os.mkfifo(ctx / "pipe")
    before = lab.containers()
    lab.estate.tenancy.set_desired("r2", lab.bundle(web=build_of(lab, ctx)))
    run = lab.tick()
    assert run.summary["code"] == "POLICY_BUILD_CONTEXT", run.stdout + run.stderr
    assert run.summary["outcome"] == "refused"
    assert run.errors[0]["phase"] == "stage"
    assert "pipe is neither a directory, a regular file nor a link" in run.errors[0]["message"]
    assert lab.containers() == before
    assert not (lab.state_dir / "revisions" / "r2").exists()
    assert not image_exists(built_name(lab))
