"""The local policy performed (``core.admission.policy`` judges): a new revision's effective
configuration before anything changes (``check``, the tick's and ``plan``'s ``policy`` phase; the
engine's word on each volume, network and container name in it: ``names_now``, cheap enough to ask
again right before ``up``), and the
running revision's under today's policy (``running``, for ``plan`` and ``doctor``: reported,
never taken down).

Imported only when a revision is prepared or by ``plan``/``doctor``: never on a no-op tick.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from monky_deployd.adapters.box.docker import composeconfig, docker_api
from monky_deployd.adapters.box.state.revisions import MODEL_FILE
from monky_deployd.config import DEFAULT_CONFIG_PATH, Config
from monky_deployd.config_policy import AllowCfg
from monky_deployd.core.admission import artifact, composefile, policy
from monky_deployd.core.admission import rules as terms
from monky_deployd.core.commands.checks import Check
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render.mask import NO_SECRETS, Masker

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
    with contextlib.suppress(DeployError):  # an engine that does not answer runs nothing
        root = docker_api.engine_info(cfg.docker)[0].get("DockerRootDir") if engine else None
        if isinstance(root, str) and root.startswith("/"):
            paths.append(root)
    found = {terms.normpath(p) for p in paths} | {os.path.realpath(p) for p in paths}
    return tuple(sorted(found))


def resolve(path: str) -> str:
    """``path`` with every symbolic link resolved, as the engine will follow them; a part that
    does not exist yet is kept as written (the engine creates it). A link the agent cannot
    follow (a directory it may not search, a loop) gives ``""``: not a path, so refused."""
    try:
        return os.path.realpath(path, strict=True)
    except FileNotFoundError:
        parent, name = os.path.split(path.rstrip("/"))
        if not name or parent == path:
            return path
        found = resolve(parent)
        return os.path.join(found, name) if found else ""
    except OSError:  # EACCES, ELOOP, ENOTDIR: what it leads to cannot be known here
        return ""


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
) -> tuple[list[terms.Violation], dict[str, object]]:
    """Every violation of the policy by the release (its compose file and rendered .env) run
    from ``project_dir``: its sources first (compose does not run when they reach outside
    it), then compose's effective model; and that model with its host paths pinned to what
    was judged (``core.admission.artifact.pinned``: what compose will run; empty when the
    sources were refused). ``engine=False`` (``bundle check``: a verdict on the bundle, on a CI
    runner with no engine): without the engine's facts (``OFFLINE`` says so)."""
    outside = policy.sources(composefile.load(release[0]))
    if outside:
        return outside, {}
    config = composeconfig.effective(cfg.docker, docker_dir, project, project_dir, release, masker)
    from monky_deployd.core.admission.host import host_paths

    values: object = None
    if names := artifact.environment_reads(config):  # what `up` reads from its environment
        override = artifact.reads(names)
        args = (cfg.docker, docker_dir, project, project_dir, release, masker, override)
        config = composeconfig.effective(*args)
        values = config.pop(artifact.READS_KEY, None)
    resolved = {found.path: resolve(found.path) for found in host_paths(config)}
    found = _judged(cfg, config, resolved, project_dir, engine=engine)
    return found, artifact.supplied(artifact.pinned(config, resolved), values)


OFFLINE = (
    "offline: the engine's facts were not judged (its data root, its containers' mounts: "
    "POLICY_SWAPPABLE_PATH, whose each volume and network name is: POLICY_FOREIGN_RESOURCE), "
    "and host paths' links were followed on this machine; each box judges its own when it "
    "applies"
)


def _judged(
    cfg: Config,
    config: dict[str, object],
    resolved: dict[str, str],
    project_dir: Path,
    *,
    engine: bool = True,
) -> list[terms.Violation]:
    """The policy's verdict on ``config`` (its paths as written, ``resolved`` where each
    leads: a line names both): its keys and values, then (``engine``) what the engine says of
    the box now: the mounts a container can write (on the paths resolved), whose each name is
    (``names_now``)."""
    found = policy.judge(config, rules(cfg, engine=engine), resolved, str(project_dir))
    if engine:
        mounts = docker_api.mounts(cfg.docker)
        found += artifact.swappable(artifact.pinned(config, resolved), mounts)
        found += names_now(cfg, config, str(config.get("name", "")))
    return sorted(set(found))


def names_now(cfg: Config, config: dict[str, object], project: str) -> list[terms.Violation]:
    """What the engine says *now* about each name of the release (``core.admission.names``):
    every top-level volume and network of ``config`` (compose's effective configuration, as
    ``judge`` returns it) and every ``container_name`` that exists and is not ``project``'s
    (another project's, or made by hand), unless config.yaml's ``volumes``/``networks``
    allowance names it; [] when none. The ``policy`` phase calls it (through ``judge``); call
    it again right before ``up`` to close the window between the judgement and the up (a
    volume made meanwhile). Costs one Engine API GET per distinct name (no subprocess, no
    ``GET /info``); an engine that does not answer raises DOCKER_UNAVAILABLE (outcome
    ``refused``: nothing may run unjudged)."""
    from monky_deployd.core.admission import names as policy_names

    facts: dict[tuple[str, str], str | None] = {}
    for kind, name in policy_names.asked(config, project):
        try:
            owners = docker_api.resource_owners(cfg.docker, kind, name)
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
        if owners:  # two networks of one name: a foreign one decides
            facts[(kind, name)] = next((o for o in owners if o != project), project)
    return policy_names.owned(config, project, facts, _allowances(cfg))


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
) -> dict[str, object]:
    """Refuse (POLICY_*) a new revision the policy does not allow; nothing has changed yet.
    Returns the judged model (``judge``): what the revision's compose calls will run."""
    found, model = judge(cfg, docker_dir, project, project_dir, release, masker)
    if found:
        raise policy.refusal(revision, found)
    return model


def recheck(cfg: Config, revision: str, project_dir: Path) -> None:
    """The revision's judged model (``compose.judged.json``) judged again right before an
    ``up``, as the engine will resolve it now: each pinned path resolves to itself, nothing
    a container can write lies on its way, the policy still allows it. POLICY_* otherwise
    (nothing was changed by this step yet)."""
    model = read_model(cfg, project_dir)
    from monky_deployd.core.admission.host import host_paths

    now = {found.path: resolve(found.path) for found in host_paths(model)}
    found = artifact.moved(model, now) + _judged(cfg, model, now, project_dir)
    if found:
        raise policy.refusal(revision, found)


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

    texts = _staged(cfg, project_dir)
    if texts is None:
        raise DeployError(
            f"revision {revision} has neither a judged model nor its compose file and .env in "
            f"{project_dir}, so this box's policy cannot judge what it would run",
            code=Code.POLICY_UNJUDGED,
            hint=f"{project_dir}; the next revision from tenancy is judged and staged anew",
        )
    model = check(cfg, docker_dir, revision, project, project_dir, texts, masker)
    atomic_write(project_dir / MODEL_FILE, artifact.text(model).encode(), 0o600)


def _staged(cfg: Config, project_dir: Path) -> tuple[str, str] | None:
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


def running(
    cfg: Config,
    docker_dir: Path,
    revisions_dir: Path,
    revision: str,
    project: str,
    masker: Masker = NO_SECRETS,
) -> list[terms.Violation] | None:
    """What today's policy would refuse in the running revision (its staged files); None when
    they are gone. Never acted on: a policy change does not take a revision down."""
    project_dir = revisions_dir / revision
    texts = _staged(cfg, project_dir)
    if texts is None:
        return None
    from monky_deployd.core.render import atrest  # what compose may echo of the .env: masked

    masker = masker.extend(atrest.secrets_in_env_file(texts[1]))
    return judge(cfg, docker_dir, project, project_dir, texts, masker)[0]


def running_lines(cfg: Config, docker_dir: Path, revisions_dir: Path, masker: Masker) -> list[str]:
    """``plan``'s and ``doctor``'s words on the applied revision under today's policy: one line
    per violation (empty: none, or nothing applied)."""
    from monky_deployd.adapters.box.state.state import StateDir

    applied = StateDir(cfg.state_dir).read_applied()
    if applied is None:
        return []
    try:
        found = running(cfg, docker_dir, revisions_dir, applied.revision, applied.project, masker)
    except DeployError as err:
        return [f"the running revision {applied.revision} cannot be judged: {err.message}"]
    if not found:
        return []
    head = (
        f"the running revision {applied.revision} breaks this box's policy (it keeps running; "
        "a new revision asking the same is refused):"
    )
    return [head, *(f"  {v.line()}" for v in found)]


def doctor_check(cfg: Config, masker: Masker) -> Check:
    """doctor's ``policy`` line: WARN naming the running services today's policy refuses."""
    from monky_deployd.adapters.box.state.state import StateDir

    state = StateDir(cfg.state_dir)
    lines = running_lines(cfg, state.docker_dir, state.revisions_dir, masker)
    if not lines:
        return Check("policy", "OK", "the running revision (if any) is within this box's policy")
    return Check(
        "policy",
        "WARN",
        lines[0].rstrip(":") + ": " + "; ".join(ln.strip() for ln in lines[1:]),
        "config.yaml's policy (the lines name the allowance), or the next bundle",
        str(Code.POLICY_REFUSED),
    )
