"""The executors of the box steps (``core.lifecycle.boxsteps``): one function per step type, in a
plain dict.

Each executor is thin: it hands the step's data to an adapter (``docker_config``, ``StateDir``,
``Compose``, ``docker_api``) and notes what it saw in the tick record. ``run`` performs a tuple
of steps in order, each inside its phase, so a failure is logged and reported with the phase
it happened in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, assert_never

from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.adapters.box.state.state import Applied
from monky_deployd.agent.apply.jobs import up_leaving_done_jobs
from monky_deployd.agent.context import Context, refresh_host_facts
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle import verify as verdict
from monky_deployd.core.lifecycle.boxsteps import (
    BoxStep,
    Commit,
    Down,
    Pull,
    Rollback,
    Stage,
    Up,
    Verify,
)
from monky_deployd.core.lifecycle.services import repo_digest
from monky_deployd.core.records import tickrecord as report
from monky_deployd.core.records.journal import Journal
from monky_deployd.core.records.release import Release, ReleaseImage

if TYPE_CHECKING:  # the box-step adapters load in the step that uses them (a no-op tick: none)
    from monky_deployd.adapters.box.docker.compose import Compose
    from monky_deployd.core.lifecycle.recheck import What

log = logging.getLogger("monky_deployd")

Phase = Callable[[str], AbstractContextManager[None]]


def stage(ctx: Context, step: Stage) -> None:
    from monky_deployd.adapters.box.docker import docker_config

    ctx.staged = step.revision
    docker_config.write_docker_config(
        ctx.state.docker_dir, step.registry_host or "", step.credential
    )
    ctx.state.write_revision(
        step.revision, step.compose, step.env_text, step.labels, step.model, step.builds
    )


def pull(ctx: Context, step: Pull) -> None:
    compose = ctx.compose(step.project, step.revision)
    note_found_before(ctx, step.revision)
    compose.pull(step.registry_host)
    if step.deploy_id:  # labels: new ones only for the services this apply changes
        from monky_deployd.agent.apply.reasons import keep_labels  # off the no-op tick's imports

        judged = ctx.judged.get(step.revision)
        ctx.labelled = keep_labels(ctx.cfg.docker, ctx.state, compose, step.deploy_id, judged)


def note_found_before(ctx: Context, revision: str) -> None:
    """The image IDs the engine gives the revision's image names before its pull and build,
    less those this project's releases recorded as their own (``Context.found_before``): an
    image among them is not this project's to remove. An engine that does not answer leaves
    it unknown (then no image of the revision is recorded as its own)."""
    from monky_deployd.adapters.box.docker import images
    from monky_deployd.core.admission import builds

    judged = ctx.judged.get(revision)
    names = {ref for _, ref, _ in builds.images(judged[0])} if judged else set()
    own = {i.id for r in ctx.state.stale_releases(set()) for i in r.images.values() if i.own}
    try:
        had = set(images.ids(ctx.cfg.docker, sorted(names)).values())
    except DeployError as err:
        log.warning(f"images on the box before the pull not known: {err}")
        return
    ctx.found_before[revision] = frozenset(had - own - {""})


def down(ctx: Context, step: Down) -> None:
    ctx.compose(step.project, step.revision, judged=False).down()


def judged_again(ctx: Context, revision: str, compose: Compose) -> None:
    """The revision's judged model judged again right before its ``up`` (``agent.policy``),
    and read by ``compose`` exactly as its ``up`` will read it (``agent.reading``)."""
    from monky_deployd.agent import policy, reading

    policy.recheck(ctx.cfg, revision, ctx.state.revision_dir(revision), ctx.masker)
    model = policy.read_model(ctx.cfg, compose.workdir)
    reading.before_up(ctx.cfg, compose, revision, model, ctx.masker)


def up(ctx: Context, step: Up) -> None:
    compose = ctx.compose(step.project, step.revision, pinned=step.pinned)
    judged_again(ctx, step.revision, compose)
    if step.pinned:  # a restore: its images first, pulled back by digest if pruned
        from monky_deployd.agent.apply.repin import ensure_images

        ensure_images(ctx, step.revision)
    if step.services:  # a restore of what is down (--no-deps): a done job is not down, and
        # one another apply replaced (drift) is made again, not run
        up_leaving_done_jobs(ctx, compose, step.project, step.services, None, whole=False)
    else:
        # an apply's labels (none when compose could not hash: every service labelled new);
        # a restore's: the last-known-good's own
        labels = ctx.labelled if ctx.staged == step.revision else None
        up_leaving_done_jobs(ctx, compose, step.project, step.every, labels)
    note_services(ctx, step.project)


def note_services(ctx: Context, project: str) -> None:
    """The project's containers as the report lists them."""
    ctx.rec.services = [
        s.as_report() for s in docker_api.project_containers(ctx.cfg.docker, project)
    ]


def verify(ctx: Context, step: Verify) -> None:
    """Poll the engine until ``core.lifecycle.verify.judge`` passes or fails the revision."""
    from monky_deployd.adapters.box.docker import watch as engine_watch

    cfg = ctx.cfg.verify
    watch = verdict.start(ctx.watch_clock())
    last_why = ""
    while True:
        observed = tuple(engine_watch.inspect_project(ctx.cfg.docker, step.project))
        got = verdict.judge(
            watch,
            kept_out(ctx, step.services),
            observed,
            ctx.watch_clock(),
            window_s=cfg.stable_s,
            deadline_s=cfg.deadline_s,
            awaited=step.awaited,
        )
        if isinstance(got, verdict.Passed):
            ctx.verified[step.project] = (got, observed)
            note_services(ctx, step.project)
            done = f"; finished jobs: {', '.join(got.done)}" if got.done else ""
            log.info(
                f"revision {step.revision} verified: {', '.join(got.services) or 'no service'} "
                f"stable for {cfg.stable_s:.0f} s{done}",
                extra={"event": "verify.passed", "revision": step.revision},
            )
            return
        if isinstance(got, verdict.Failed):
            note_services(ctx, step.project)
            raise DeployError(
                f"revision {step.revision} did not prove itself: {got.message}",
                code=got.code,
                hint=f"`docker logs` of {step.project}'s {got.service} container and its "
                "healthcheck; the compose file and .env of this revision",
                detail=ctx.masker(got.detail),
            )
        watch = got.watch
        if got.why != last_why:
            log.info(
                f"verify waiting: {got.why}",
                extra={"event": "verify.waiting", "revision": step.revision},
            )
            last_why = got.why
        ctx.sleep(cfg.poll_s)


def kept_out(ctx: Context, services: tuple[str, ...]) -> tuple[str, ...]:
    """The services verify waits for: not the jobs this tick's ``up`` kept (done for their
    config, never started again: a container made again and not started stays ``created``)."""
    return tuple(s for s in services if s not in ctx.kept_jobs)


def rollback(ctx: Context, step: Rollback) -> None:
    """Down the failed project when it is another one, then ``up`` the LKG pinned, no pull."""
    if step.failed_project != step.project:
        ctx.compose(step.failed_project, step.failed_revision, judged=False).down()
    pinned = ctx.state.has_pins(step.revision)
    compose = ctx.compose(step.project, step.revision, pinned=pinned)
    judged_again(ctx, step.revision, compose)
    if pinned:  # the LKG's images first, pulled back by digest if pruned
        from monky_deployd.agent.apply.repin import ensure_images

        ensure_images(ctx, step.revision)
    applied = ctx.state.read_applied()  # the last-known-good's record: its labels, its jobs
    every = tuple(dict.fromkeys([*applied.services, *applied.jobs])) if applied else ()
    up_leaving_done_jobs(ctx, compose, step.project, every, None)


def commit(ctx: Context, step: Commit) -> None:
    now = report.rfc3339(ctx.clock())
    passed, observed = ctx.verified.get(step.project, (None, ()))
    had = ctx.found_before.get(step.revision)
    images = {
        c.service: ReleaseImage(
            c.image_id, c.image_ref, _digest(ctx, c), had is not None and c.image_id not in had
        )
        for c in observed
    }
    # the long-running services: a finished job (exit 0, restart "no") is not expected to run
    running = list(passed.services) if passed is not None else list(step.services)
    from monky_deployd.core.lifecycle import jobs as lifecycle  # off the no-op tick's imports

    # the services that may finish (exit 0 = done, never restored): core.lifecycle.jobs
    jobs = sorted({c.service for c in observed if lifecycle.may_finish(c.restart_policy)})
    # the jobs that ran to completion in verify, and those the up left alone (done before)
    finished = set(passed.done) if passed is not None else set()
    done = dict(ctx.kept_jobs)
    done.update({c.service: c.made_by for c in observed if c.service in finished})
    release = Release(
        step.revision,
        step.project,
        list(step.services),
        images,
        step.compose_sha256,
        step.env_sha256,
        now,
    )
    from monky_deployd.core.records.reasons import image_reason  # off the no-op tick's imports

    before = ctx.state.read_release(step.previous) if step.previous else None
    if before is not None:
        moved = image_reason(
            {s: i.digest for s, i in before.images.items()},
            {s: i.digest for s, i in images.items()},
        )
        ctx.rec.reasons += moved
        for r in moved:
            log.info(f"reasons: {r}", extra={"event": "apply.reasons", "reasons": [r.kind]})
    ctx.state.write_release(release)
    before_commit = ctx.state.read_applied()
    fp = step.fingerprint
    ctx.state.write_applied(
        Applied(
            step.revision,
            step.project,
            running,
            now,
            [r.as_wire() for r in ctx.rec.reasons],
            step.deploy_id,
            fp.compose_sha256 if fp else "",
            dict(fp.env) if fp else {},
            dict(fp.secrets) if fp else {},
            dict(ctx.labelled),
            step.previous or "",
            jobs,
            done,
        )
    )
    ctx.state.clear_held()
    from monky_deployd.agent.apply import bakestart  # off the no-op tick's imports

    bakestart.start(ctx, step.revision, step.project, observed, before_commit)  # before the GC
    collect(ctx, step.revision, step.previous)
    refresh_host_facts(ctx, compose=_compose_confirmed(ctx, step))


def _compose_confirmed(ctx: Context, step: Commit) -> str:
    """Compose's cached version when the containers this apply's ``up`` created confirm it, so
    the host facts need no ``docker compose version`` process; "" otherwise (then it runs).

    Those labelled with this apply's deploy id carry the version of the compose that created
    them (``com.docker.compose.version``). That label is the core version (``2.40.3``) where
    ``--short`` prints the whole one (``2.40.3-desktop.1`` on some builds): only an exact match
    with what ``--short`` said before is taken; a new compose, a suffixed build, no cache or no
    container created by this apply ask the CLI as before."""
    cached = ctx.state.read_host_facts()
    if not step.deploy_id or cached is None or not cached.compose:
        return ""
    from monky_deployd.core.records.reasons import LABEL_DEPLOY_ID  # off the no-op tick's imports

    try:
        made = docker_api.compose_version_of(
            ctx.cfg.docker, step.project, LABEL_DEPLOY_ID, step.deploy_id
        )
    except DeployError:  # (the tick's deadline is a TickDeadline: it is not caught here)
        return ""
    return cached.compose if made == cached.compose else ""


def collect(ctx: Context, revision: str, previous: str | None) -> None:
    """The image GC after a commit: the images only older releases ran are removed first, then
    their revision directories (with release.json), so a tick killed in between leaves the
    releases that name its images and the next tick (or commit) finishes the GC."""
    keep = {revision} | ({previous} if previous else set())
    baking = ctx.state.read_bake()
    if baking is not None and baking.revision == revision and baking.previous_revision:
        keep.add(baking.previous_revision)  # the last-known-good stays until the bake is over
    stale = ctx.state.stale_releases(keep)
    if stale and not remove_images(ctx, stale, keep):
        return  # the engine could not say which images are in use: the releases stay for later
    ctx.state.prune_revisions(keep=keep)


def resume_collect(ctx: Context, applied: Applied, interrupted: Journal) -> None:
    """A tick killed inside its commit (the GC) left the applied revision committed: finish
    that GC, journaled as the commit it belongs to (killed again, the next tick resumes it)."""
    if interrupted.revision != applied.revision:
        return
    log.info(
        f"the tick {interrupted.tick_id} was killed in the commit of {applied.revision}: "
        "finishing its image GC",
        extra={"event": "prune.resumed", "phase": "plan"},
    )
    ctx.state.write_journal(Journal(applied.revision, "commit", ctx.rec.tick_id, ctx.clock()))
    collect(ctx, applied.revision, applied.previous or None)
    ctx.state.clear_journal()


def remove_images(ctx: Context, pruned: list[Release], keep: set[str]) -> bool:
    """``docker image rm <id>`` (never forced) for images only pruned releases ran
    (``core.lifecycle.prune``); a refusal (a container uses it, several tags name it) is only
    logged. False when the engine could not list the images in use (nothing was tried)."""
    from monky_deployd.adapters.box import runner
    from monky_deployd.adapters.box.docker.compose import docker_env
    from monky_deployd.core.lifecycle import prune

    kept = [r for r in (ctx.state.read_release(rev) for rev in keep) if r is not None]
    try:
        in_use = docker_api.images_in_use(ctx.cfg.docker)
    except DeployError as err:
        log.warning(f"images not pruned: {err}", extra={"event": "prune.skipped"})
        return False
    env = docker_env(ctx.cfg.docker, ctx.state.docker_dir)
    for image_id in prune.images_to_remove(pruned, kept, in_use):
        result = runner.run(
            (ctx.cfg.docker.binary, "image", "rm", image_id),
            env=env,
            timeout=ctx.cfg.docker.command_timeout_s,
            check=False,
        )
        ok = result.returncode == 0
        log.info(
            f"image {image_id[:19]} of a pruned release "
            + ("removed" if ok else f"kept: {runner.last_line(result.stderr)}"),
            extra={"event": "prune.image", "image": image_id, "removed": ok},
        )
    return True


def _digest(ctx: Context, c: verdict.ContainerObs) -> str:
    """The RepoDigest of the container's image in the repository its compose reference names."""
    if not c.image_id:
        return ""
    return repo_digest(c.image_ref, docker_api.repo_digests(ctx.cfg.docker, c.image_id))


# the steps that change containers: locks and suspend are read again before each
CHANGING = (Down, Up, Rollback)


def execute(ctx: Context, step: BoxStep) -> None:
    """The one executor of ``step``'s kind: exhaustive (a ``BoxStep`` without a case here is a
    mypy error at ``assert_never``)."""
    match step:
        case Stage():
            stage(ctx, step)
        case Pull():
            pull(ctx, step)
        case Down():
            down(ctx, step)
        case Up():
            up(ctx, step)
        case Verify():
            verify(ctx, step)
        case Rollback():
            rollback(ctx, step)
        case Commit():
            commit(ctx, step)
        case _:
            assert_never(step)


def run(ctx: Context, steps: tuple[BoxStep, ...], phase: Phase, gate: What | None = None) -> None:
    """Perform ``steps`` in order, each inside its phase; the first failure ends the run.
    Each step is journaled (``journal.json``) before it runs: a killed tick leaves it behind.
    ``gate``: what the steps are for; each step that changes containers (down, up, rollback)
    first reads the update locks and the suspend again (``agent.apply.gate``: ``Gated``)."""
    for step in steps:
        if gate is not None and isinstance(step, CHANGING):
            from monky_deployd.agent.apply import gate as gates  # off the no-op tick's imports

            gates.check(ctx.cfg, ctx.state, gate, step.revision, step.phase, ctx.clock())
        ctx.state.write_journal(Journal(step.revision, step.phase, ctx.rec.tick_id, ctx.clock()))
        with phase(step.phase):
            execute(ctx, step)
