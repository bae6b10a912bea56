"""An apply's checks, performed: ``core.admission.prepare``'s pure functions around their reads
(OpenBao, the Engine API), each inside its phase. Nothing on the box changes here; the tick and
``plan`` run the very same checks (``plan`` with a phase that only logs).

    bundle (its signatures first: ``agent.apply.trust``) -> secrets -> render -> policy -> registry
    -> preflight (disk, project ownership) -> Ready
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.agent import context
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import BaoError, DeployError
from monky_deployd.core.render import mask

if TYPE_CHECKING:
    from monky_deployd.adapters.net.bao import Bao, KvPages
    from monky_deployd.core.admission import prepare
    from monky_deployd.core.admission.bundle import Bundle, ManifestEntry
    from monky_deployd.core.lifecycle.boxsteps import Ready
    from monky_deployd.core.lifecycle.plans import Apply
    from monky_deployd.core.signing.trust import Verdict

Phase = Callable[[str], AbstractContextManager[None]]


@dataclass
class Checked:
    """What the checks read on the way (``core.records.reasons``' fingerprint needs the values)."""

    secrets: dict[str, object] = field(default_factory=dict)  # manifest name -> KV value
    trust: Verdict | None = None  # the signatures' verdict (contract v1.3, ``agent.apply.trust``)


def check_owned(ctx: context.Context, project: str) -> None:
    """PROJECT_NOT_OWNED unless every container of ``project`` came from our revisions/
    (with no container: unless its volumes/networks are of a project we started)."""
    from monky_deployd.core.admission import prepare

    cfg, state = ctx.cfg, ctx.state
    dirs = docker_api.project_working_dirs(cfg.docker, project)
    left = [] if dirs else docker_api.project_leftovers(cfg.docker, project)
    known = bool(left) and project in state.read_projects()
    prepare.check_owned(project, dirs, str(state.revisions_dir.absolute()), left, known)


def check(
    ctx: context.Context, bao: Bao, token: str, plan: Apply, phase: Phase, out: Checked
) -> Ready:
    """Every check of an apply, each in its phase: nothing on the box changes."""
    from monky_deployd.adapters.box.docker import preflight
    from monky_deployd.adapters.box.docker.compose import docker_env
    from monky_deployd.core.admission import prepare

    cfg = ctx.cfg
    with phase("bundle"):
        from monky_deployd.agent.apply import trust  # signed bundles: before anything is read

        out.trust = trust.check(ctx, plan.revision, dict(plan.bundle))
        bundle = prepare.check_bundle(plan.revision, plan.bundle)
    with phase("secrets"):
        reads = read_secrets(bao, token, bundle)
        ctx.learn(mask.strings_in(list(reads.found.values())))
        out.secrets = {e.name: v for e, v in reads.found.items()}
        env = prepare.env_values(bundle, reads)
        # the registry password too, before compose reads the release: a manifest may name its
        # key as a variable, and compose's error may echo the password alone (a short one is
        # no run of 8 of the whole `user:password`); a refusal of it is the registry phase's
        with suppress(DeployError):
            ctx.learn(prepare.secrets_of(env, prepare.credential(bundle, env)))
    with phase("render"):
        env_text = prepare.render_env(bundle.env_template, env)
        prepare.check_environment(bundle, env_text)
    with phase("policy"):  # the box's own rule, on compose's reading of the release
        from monky_deployd.agent import policy

        project_dir = ctx.state.revisions_dir.absolute() / bundle.revision
        release = (bundle.compose, env_text)
        effective, copies = policy.check(
            cfg, ctx.state.docker_dir, bundle.revision, bundle.project, project_dir, release,
            ctx.masker,
        )  # fmt: skip
        ctx.judged[bundle.revision] = (effective, env_text)  # the labels' config digests
        from monky_deployd.core.admission import artifact

        model = artifact.text(effective)
    with phase("registry"):
        cred = prepare.credential(bundle, env)
        ctx.learn(prepare.secrets_of(env, cred))
    with phase("preflight"):
        denv = docker_env(cfg.docker, ctx.state.docker_dir)
        info = preflight.docker_info(cfg.docker, denv)
        targets = preflight.pull_targets(info, cfg.docker)
        # where pulls write, known even when the check refuses: the ledger and the metrics
        ctx.rec.pull_filesystems = tuple(str(t) for t in targets)
        preflight.check_space(targets, bundle.disk_need_bytes, cfg.disk.headroom_bytes)
        prev = plan.previous.project if plan.previous else None
        for project in dict.fromkeys(p for p in (bundle.project, prev) if p):  # up, down
            check_owned(ctx, project)
    # Everything is checked: only now may anything on the box change.
    return prepare.ready(bundle, env_text, cred, ctx.rec.tick_id, model, tuple(copies))


def read_secrets(bao: Bao, token: str, bundle: Bundle) -> prepare.SecretReads:
    """Every manifest entry from OpenBao. A variable's secret that OpenBao lacks is noted
    (ENV_INCOMPLETE names them all at render); a missing registry credential ends the tick."""
    from monky_deployd.core.admission import prepare

    found: dict[ManifestEntry, object] = {}
    absent: dict[str, str] = {}
    pages: KvPages = {}  # one OpenBao read per distinct path
    for entry in bundle.manifest:
        try:
            found[entry] = bao.read_secret(token, entry.path, entry.key, pages)
        except BaoError as err:
            if err.code is not Code.SECRET_MISSING or entry.use is not None:
                raise
            absent[entry.name] = f"{entry.path}#{entry.key}"
    return prepare.SecretReads(found, absent)
