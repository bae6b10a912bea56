"""The local policy performed (``core.admission.policy`` judges): a new revision's effective
configuration before anything changes (``check``, the tick's and ``plan``'s ``policy`` phase; the
engine's word on each volume, network and container name in it: ``names_now``, cheap enough to ask
again right before ``up``). The running revision under today's policy, for ``plan`` and
``doctor``, is ``agent.policyview``'s.

Imported only when a revision is prepared or by ``plan``/``doctor``: never on a no-op tick.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from pathlib import Path

from monky_deployd.adapters.box.docker import composeconfig, docker_api, hostpath, images
from monky_deployd.adapters.box.state.revisions import MODEL_FILE
from monky_deployd.config import DEFAULT_CONFIG_PATH, Config
from monky_deployd.config_policy import HIDDEN_BY_UNIT, AllowCfg
from monky_deployd.core.admission import artifact, builds, composefile, policy, reading
from monky_deployd.core.admission import rules as terms
from monky_deployd.core.admission.host import HostPath, host_paths
from monky_deployd.core.admission.paths import Where, faults
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render.mask import NO_SECRETS, Masker

log = logging.getLogger(__name__)

# Reached by no bind mount whatever the allowances say: the engine's and containerd's sockets
# and stores, the host's root and its system trees (the agent's own directories are added).
ALWAYS_PROTECTED = (
    "/",
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/docker",
    "/run/containerd",
    "/var/run/containerd",
    "/var/lib/docker",
    "/var/lib/containerd",
)


def _allow(cfg: AllowCfg) -> terms.Allow:
    return terms.Allow(
        privileged=cfg.privileged,
        host_namespaces=frozenset(cfg.host_namespaces),
        cap_add=frozenset(cfg.cap_add),
        devices=frozenset(terms.normpath(d) if d.startswith("/") else d for d in cfg.devices),
        security_opt=frozenset(terms.security_opt(o) for o in cfg.security_opt),
        sysctls=frozenset(cfg.sysctls),
        cgroup_parent=frozenset(cfg.cgroup_parent),
        # each root as written and resolved: a path is judged in both forms (a root or a
        # path through a link, /lib -> /usr/lib, is allowed the same way on both sides)
        bind_roots=tuple(
            dict.fromkeys(
                f for r in cfg.bind_roots for f in (terms.normpath(str(r)), os.path.realpath(r))
            )
        ),
        providers=frozenset(cfg.providers),
        volumes=frozenset(cfg.volumes),
        networks=frozenset(cfg.networks),
        log_drivers=frozenset(cfg.log_drivers),
        oom_score_adj=cfg.oom_score_adj,
        read_only_files=_files(cfg.read_only_files),
        build=cfg.build,
        cpu_shares=cfg.cpu_shares,
        blkio_weight=cfg.blkio_weight,
    )


def _files(paths: list[Path]) -> frozenset[str]:
    """``read_only_files`` that are regular files now (links followed; a directory, a socket
    or a missing path is dropped: it allows nothing), each as written and resolved."""
    import stat

    found: set[str] = set()
    for path in paths:
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)
        except OSError:
            continue
        if regular:
            found |= {terms.normpath(str(path)), os.path.realpath(path)}
    return frozenset(found)


def protected(cfg: Config, engine: bool = True) -> tuple[str, ...]:
    """The paths no bind mount may reach, as written and with their symlinks resolved: the
    fixed ones, the docker socket configured, the engine's own data root (``DockerRootDir`` of
    ``GET /info``, when it answers and ``engine``: a moved ``data-root``), the agent's config dir
    (/etc/monky-deployd: a config.yaml elsewhere is under /etc in practice), state dir, grant,
    the Ziti identity's directory."""
    paths = [
        *ALWAYS_PROTECTED,
        str(DEFAULT_CONFIG_PATH.parent),
        str(cfg.state_dir.absolute()),
        str(cfg.grant_file.absolute()),
        str(cfg.identity_path.absolute().parent),
    ]
    host = cfg.docker.host or ""
    if host.startswith("unix://"):
        paths.append(host.removeprefix("unix://"))
    if cfg.docker.containerd_root is not None:
        paths.append(str(cfg.docker.containerd_root))
    root = _engine_fact(cfg, "DockerRootDir") if engine else None
    if isinstance(root, str) and root.startswith("/"):
        paths.append(root)
    found = {terms.normpath(p) for p in paths} | {os.path.realpath(p) for p in paths}
    return tuple(sorted(found))


def _engine_fact(cfg: Config, key: str) -> object:
    """One field of the engine's ``GET /info`` (None when it does not answer: an engine that
    does not answer runs nothing)."""
    with contextlib.suppress(DeployError):
        return docker_api.engine_info(cfg.docker)[0].get(key)
    return None


def blkio_default(cfg: Config, engine: bool = True) -> int:
    """The block-I/O weight a service may ask without an allowance: the engine's default
    under its cgroup version (``GET /info``'s ``CgroupVersion``; v2 when unknown: the lower)."""
    version = _engine_fact(cfg, "CgroupVersion") if engine else None
    return terms.BLKIO_DEFAULT.get(str(version), terms.BLKIO_DEFAULT["2"])


def resolve(path: str) -> str:
    """``path`` with every symbolic link resolved, as the engine will follow them
    (``adapters.box.docker.hostpath.follow``: a missing tail no link leads to is kept as
    written, the engine creates it); ``""`` when it cannot be followed (a loop, a part the
    agent may not search): not a path, so refused."""
    return hostpath.follow(path).real


def follow(paths: list[HostPath]) -> dict[str, Where]:
    """Each host path followed (``adapters.box.docker.hostpath.follow``), by the path as written."""
    return {found.path: hostpath.follow(found.path) for found in paths}


def rules(cfg: Config, engine: bool = True) -> terms.Rules:
    """config.yaml's ``policy`` as ``core.admission.rules.Rules``; ``locks.dir`` is always a
    root; ``engine``: the engine's own facts among the protected paths (``protected``)."""
    every = _allow(cfg.policy.allow)
    # the update-lock directory is the agent's own interface for apps: always an allowed root
    lock_root = os.path.realpath(cfg.locks.dir)
    every = dataclasses.replace(every, bind_roots=(*every.bind_roots, lock_root))
    return terms.Rules(
        allow=every,
        services={name: _allow(scope) for name, scope in cfg.policy.services.items()},
        protected=protected(cfg, engine),
        keys=tuple(cfg.policy.keys),
        blkio_default=blkio_default(cfg, engine),
    )


def judge(
    cfg: Config,
    docker_dir: Path,
    project: str,
    project_dir: Path,
    release: tuple[str, str],
    masker: Masker = NO_SECRETS,
    *,
    engine: bool = True,
) -> tuple[list[terms.Violation], dict[str, object], tuple[str, ...]]:
    """Every violation of the policy by the release (its compose file and rendered .env) run
    from ``project_dir``: its sources first (compose does not run when they reach outside
    it), then compose's effective model; and that model with its host paths pinned to what
    was judged (``core.admission.artifact.pinned``: what compose will run; empty when the
    sources were refused). ``engine=False`` (``bundle check``: a verdict on the bundle, on a CI
    runner with no engine): without the engine's facts (``OFFLINE`` says so). Third: compose's
    warnings on the release (an unset variable read as blank, an obsolete key: they refuse
    nothing)."""
    found, model, _, warned = _judge(cfg, docker_dir, project, project_dir, release, masker, engine)
    return found, model, warned


def _judge(
    cfg: Config,
    docker_dir: Path,
    project: str,
    project_dir: Path,
    release: tuple[str, str],
    masker: Masker,
    engine: bool,
) -> tuple[list[terms.Violation], dict[str, object], list[builds.Copy], tuple[str, ...]]:
    """``judge``, with the copies its model builds from (``core.admission.builds.copies``: of
    the very paths judged, as resolved then)."""
    outside = policy.sources(composefile.load(release[0]))
    if outside:
        return outside, {}, [], ()
    compose = (cfg.docker, docker_dir, project, project_dir, release, masker)
    config, warned = composeconfig.effective(*compose)
    values: object = None
    if names := artifact.environment_reads(config):  # what `up` reads from its environment
        override = artifact.reads(names)
        config, _ = composeconfig.effective(*compose, override)  # warned above already
        values = config.pop(artifact.READS_KEY, None)
    where = follow(host_paths(config))
    resolved = {path: at.real for path, at in where.items()}
    found = _judged(cfg, config, where, project_dir, engine=engine, masker=masker)
    pinned = artifact.pinned(config, resolved)
    found = sorted({*found, *reading.host_strings(pinned)})  # a path a link led to: pinned
    model, copies = builds.copies(artifact.supplied(pinned, values), resolved, str(project_dir))
    found = sorted({*found, *artifact.too_large(model), *artifact.odd_reads(model)})
    return found, model, copies, warned


OFFLINE = (
    "offline: the engine's facts were not judged (its data root, its containers' mounts: "
    "POLICY_SWAPPABLE_PATH, whose each volume and network name is: POLICY_FOREIGN_RESOURCE, "
    "how the project's own are defined: POLICY_RESOURCE_DRIFT), "
    "and host paths' links were followed on this machine; each box judges its own when it "
    "applies"
)


def _judged(
    cfg: Config,
    config: dict[str, object],
    where: dict[str, Where],
    project_dir: Path,
    *,
    engine: bool = True,
    masker: Masker = NO_SECRETS,
) -> list[terms.Violation]:
    """The policy's verdict on ``config`` (its paths as written, ``where`` each leads: a line
    names both): its keys and values, each path's way (a dangling link, a directory the unit
    hides: ``core.admission.paths.faults``), then (``engine``) what the engine says of the box
    now: the mounts a container can write (compared by identity with the directories on each
    path's way), whose each name is (``names_now``)."""
    resolved = {path: at.real for path, at in where.items()}
    found = policy.judge(config, rules(cfg, engine=engine), resolved, str(project_dir))
    found += reading.host_strings(config)  # what the judges read is what up reads
    found += faults(host_paths(config), where, HIDDEN_BY_UNIT, str(project_dir))
    if engine:
        mounts = hostpath.with_identity(docker_api.mounts(cfg.docker))
        model = artifact.pinned(config, resolved)
        seen = {**where, **{m.source: hostpath.follow(m.source) for m in mounts}}
        seen |= {at.real: at for at in where.values() if at.real}  # the pinned model's paths
        found += artifact.swappable(model, mounts, seen)
        found += names_now(cfg, config, str(config.get("name", "")), masker)
        from monky_deployd.adapters.box.state.state import StateDir

        mine = StateDir(cfg.state_dir).read_projects()  # this agent's own, a renamed one too
        project = str(config.get("name", ""))
        found += builds.foreign_tags(config, project, images.users(cfg.docker), mine)
    return sorted(set(found))


def names_now(
    cfg: Config, config: dict[str, object], project: str, masker: Masker = NO_SECRETS
) -> list[terms.Violation]:
    """What the engine says *now* about each name of the release (``core.admission.names``):
    every top-level volume and network of ``config`` (compose's effective configuration, as
    ``judge`` returns it) and every ``container_name`` that exists and is not ``project``'s
    (another project's, or made by hand), unless config.yaml's ``volumes``/``networks``
    allowance names it; and each of the project's own volumes and networks the engine defines
    otherwise than ``config`` (``core.admission.reading.drift``: POLICY_RESOURCE_DRIFT, the
    same answers); [] when none. The ``policy`` phase calls it (through ``judge``); call
    it again right before ``up`` to close the window between the judgement and the up (a
    volume made meanwhile). Costs one Engine API GET per distinct name (no subprocess, no
    ``GET /info``); an engine that does not answer raises DOCKER_UNAVAILABLE (outcome
    ``refused``: nothing may run unjudged)."""
    from monky_deployd.core.admission import names as policy_names

    facts: dict[tuple[str, str], str | None] = {}
    objects: dict[tuple[str, str], list[dict[str, object]]] = {}
    for kind, name in policy_names.asked(config, project):
        try:
            objects[(kind, name)] = docker_api.resource_objects(cfg.docker, kind, name)
        except DeployError as err:
            if err.code not in (Code.DOCKER_UNAVAILABLE, Code.DOCKER_RESPONSE_TOO_LARGE):
                raise
            raise DeployError(
                f"the local policy cannot learn from the Docker engine whose {kind} {name} "
                f"is, so the release is not run: {err.message}",
                code=err.code,
                hint=err.hint,
                detail=err.detail,
                outcome="refused",
            ) from err
        owners = docker_api.owners(kind, objects[(kind, name)])
        if owners:  # two networks of one name: a foreign one decides
            facts[(kind, name)] = next((o for o in owners if o != project), project)
    found = policy_names.owned(config, project, facts, _allowances(cfg))
    return found + reading.drift(config, project, objects, masker)


def _allowances(cfg: Config) -> terms.Rules:
    """config.yaml's allowances alone (what ``core.admission.names`` reads: no protected path,
    no ``GET /info``)."""
    return terms.Rules(
        allow=_allow(cfg.policy.allow),
        services={name: _allow(scope) for name, scope in cfg.policy.services.items()},
    )


def check(
    cfg: Config,
    docker_dir: Path,
    revision: str,
    project: str,
    project_dir: Path,
    release: tuple[str, str],
    masker: Masker,
) -> tuple[dict[str, object], list[builds.Copy]]:
    """Refuse (POLICY_*) a new revision the policy does not allow; nothing has changed yet.
    Returns the judged model (``judge``): what the revision's compose calls will run, and the
    copies of what its builds read (made when the revision is staged)."""
    found, model, copies, warned = _judge(
        cfg, docker_dir, project, project_dir, release, masker, True
    )
    for said in warned:  # the journal's only record of what compose let pass
        log.warning(
            f"compose warns on revision {revision}: {said}",
            extra={"event": "policy.compose_warning", "revision": revision},
        )
    if found:
        raise policy.refusal(revision, found)
    from monky_deployd.agent import reading as one_reading

    text = artifact.text(model)  # the bytes written: compose reads them back as judged
    one_reading.of_text(cfg, docker_dir, revision, project, project_dir, model, text, masker)
    return model, copies


def recheck(cfg: Config, revision: str, project_dir: Path, masker: Masker = NO_SECRETS) -> None:
    """The revision's judged model (``compose.judged.json``) judged again right before an
    ``up``, as the engine will resolve it now: each pinned path resolves to itself, nothing
    a container can write lies on its way, the policy still allows it. POLICY_* otherwise
    (nothing was changed by this step yet). Then each pinned path is held as this up finds it
    (``paths.held.json``: ``adapters.box.docker.hostpath.write_held``), checked on every tick."""
    model = read_model(cfg, project_dir)
    where = follow(host_paths(model))
    now = {path: at.real for path, at in where.items()}
    found = artifact.moved(model, now) + _judged(cfg, model, where, project_dir, masker=masker)
    if found:
        raise policy.refusal(revision, found)
    from monky_deployd.core.admission.paths import hold

    hostpath.write_held(project_dir, hold(artifact.binds(model), where))


def read_model(cfg: Config, project_dir: Path) -> dict[str, object]:
    """The judged model of the revision in ``project_dir``; POLICY_UNJUDGED when it is
    missing or unreadable."""
    import json

    from monky_deployd.adapters import fsread

    path = project_dir / MODEL_FILE
    try:
        raw = fsread.read_entry(path, cfg.max_bundle_bytes * 8)
        model = json.loads(raw) if raw is not None else None
    except (fsread.BadEntry, ValueError, RecursionError):
        model = None
    if not isinstance(model, dict):
        raise DeployError(
            f"the judged model {path} of this revision is missing or unreadable, so nothing "
            "says what this box's policy allowed it to run",
            code=Code.POLICY_UNJUDGED,
            hint=f"{path} (written by the apply that staged the revision)",
        )
    return model


def ensure_model(
    cfg: Config, docker_dir: Path, revision: str, project: str, project_dir: Path, masker: Masker
) -> None:
    """A revision staged by an agent before the judged model existed: its compose file and
    .env judged by today's policy and the model written (once); POLICY_* when refused.
    ``masker`` already knows the revision's secrets at rest (``Context.compose`` learns them
    first)."""
    if (project_dir / MODEL_FILE).exists():
        return
    from monky_deployd.adapters.fsutil import atomic_write

    texts = staged(cfg, project_dir)
    if texts is None:
        raise DeployError(
            f"revision {revision} has neither a judged model nor its compose file and .env in "
            f"{project_dir}, so this box's policy cannot judge what it would run",
            code=Code.POLICY_UNJUDGED,
            hint=f"{project_dir}; the next revision from tenancy is judged and staged anew",
        )
    model, copies = check(cfg, docker_dir, revision, project, project_dir, texts, masker)
    from monky_deployd.adapters.box.state import buildcopy

    buildcopy.make(copies, project_dir)
    atomic_write(project_dir / MODEL_FILE, artifact.text(model).encode(), 0o600)


def staged(cfg: Config, project_dir: Path) -> tuple[str, str] | None:
    """A staged revision's compose file and .env (None when either is gone)."""
    from monky_deployd.adapters import fsread
    from monky_deployd.adapters.box.state.state import COMPOSE_FILE, ENV_FILE

    texts = []
    for name in (COMPOSE_FILE, ENV_FILE):
        try:
            raw = fsread.read_entry(project_dir / name, cfg.max_bundle_bytes * 4)
        except fsread.BadEntry:
            return None
        if raw is None:
            return None
        texts.append(raw.decode("utf-8", "replace"))
    return texts[0], texts[1]
