"""The box's local policy: what a bundle's services may ask of the box. Pure: no I/O.

The default is Kubernetes Pod Security "baseline" adapted to compose: no ``privileged``, no host
namespace (``pid``/``ipc``/``uts``/``userns_mode``/``network_mode``/``cgroup``: host), no
capability beyond baseline's default set, no ``devices``, no unconfined or disabled
``security_opt``, only baseline's safe ``sysctls``, no ``cgroup_parent``, no bind mount (a
secret's or config's ``file``, a local volume's ``device`` too) outside the allowed roots (and
no relative path anywhere: the engine resolves it from its own working directory), nothing that
acts beyond the container's own namespaces and cgroup (a log driver other than the engine's
local ones, a negative ``oom_score_adj``, ``ulimits.rtprio``, a block device's I/O limit). Each
allowance (``Allow``) is opt-in and narrow, for every service or for one. Some paths are refused
whatever the allowances say (``Rules.protected``: the engine's sockets, ``/``, ``/etc``, ...).

``judge`` reads the *effective* configuration, the JSON of ``docker compose config --format
json`` over the rendered release (``agent.policy`` runs it): every key of it against the
allow-list (``core.policy_keys``: a key it does not know is refused), the judges here and those
of what reaches the host beyond a container (``core.policy_host``), and every host path it
names through the one host-path judge (``_bind``); ``sources`` reads the compose file's
own YAML for what compose would fetch while resolving it (``include``, ``extends.file``,
``label_file``), so it runs first. Each returns one ``Violation`` per fault; ``refusal`` makes
them one ``DeployError`` whose first line names the first fault.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from monky_deployd.core.errors import Code, DeployError

if TYPE_CHECKING:
    from monky_deployd.core.policy_host import HostPath
    from monky_deployd.core.policy_keys import KeyFault

SOURCE = Code.POLICY_SOURCE
# Pod Security baseline: the capabilities a container may add (the runtime's default set).
BASELINE_CAPS = frozenset(
    {
        *("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD"),
        *("NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"),
    }
)
# Pod Security baseline: the "safe" sysctls (namespaced, isolated from the host and other pods).
SAFE_SYSCTLS = frozenset(
    {
        *("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range"),
        *("net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies"),
        *("net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports"),
        *("net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout"),
        *("net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"),
    }
)
GPU = "gpu"  # the ``devices`` allowance of device requests (``gpus``, reserved devices)
# a service's key whose value "host" shares that host namespace -> the namespace's name
HOST_NAMESPACE_KEYS = {
    "pid": "pid",
    "ipc": "ipc",
    "uts": "uts",
    "userns_mode": "userns",
    "network_mode": "network",
    "cgroup": "cgroup",
}
HOST_NAMESPACES = tuple(HOST_NAMESPACE_KEYS.values())
# security_opt values that turn a confinement off (after ``:`` became ``=``)
UNCONFINED_OPTS = frozenset(
    {"apparmor=unconfined", "seccomp=unconfined", "label=disable", "systempaths=unconfined"}
)
# The engine's log drivers that write where the engine keeps its own files or the host's
# journal, and ``none``. Every other driver (syslog, gelf, fluentd, splunk, awslogs, a plugin)
# runs in the engine, in the host's network namespace: it reaches the host's sockets and
# 127.0.0.1 even for a container with ``network_mode: none``.
LOCAL_LOG_DRIVERS = frozenset({"json-file", "local", "journald", "none"})
# The options of the local drivers (and the engine's own: ``mode``, ``max-buffer-size``), none
# of which names a host address, path or socket; any other option is refused (fail closed).
LOG_OPTIONS = frozenset(
    {
        *("max-size", "max-file", "compress", "labels", "labels-regex", "env", "env-regex"),
        *("tag", "mode", "max-buffer-size"),
    }
)
RELATIVE = "is a relative path, resolved by the engine from its own working directory"
HOME = (
    "starts with ~: the agent runs compose without HOME, so compose reads ~ as a directory of "
    "the release (the revision directory, replaced on every apply), not a home directory"
)


@dataclass(frozen=True)
class Allow:
    """The allowances of one scope (every service, or one service): each opt-in and narrow."""

    privileged: bool = False
    host_namespaces: frozenset[str] = frozenset()  # pid ipc uts userns network cgroup
    cap_add: frozenset[str] = frozenset()  # capability names, upper case, no CAP_
    devices: frozenset[str] = frozenset()  # host device paths (or a device_cgroup_rule)
    security_opt: frozenset[str] = frozenset()  # an option as written, ':' read as '='
    sysctls: frozenset[str] = frozenset()  # sysctl names beyond SAFE_SYSCTLS
    cgroup_parent: frozenset[str] = frozenset()
    bind_roots: tuple[str, ...] = ()  # absolute host directories (and what is below them)
    providers: frozenset[str] = frozenset()  # programs a ``provider`` service may run
    log_drivers: frozenset[str] = frozenset()  # log drivers beyond LOCAL_LOG_DRIVERS
    oom_score_adj: int = 0  # the lowest oom_score_adj a service may ask (-1000..0)
    # protected files a read-only bind may name exactly (/etc/localtime): regular files only,
    # each as written and with its links resolved (``agent.policy`` drops any other entry)
    read_only_files: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Rules:
    """The policy: ``allow`` for every service, ``services`` for one by name, the paths no
    bind mount may reach (``protected``: normalized absolute paths, symlinks resolved too), and
    the key paths allowed beyond the key table's defaults (``keys``: ``policy.keys``)."""

    allow: Allow = Allow()
    services: Mapping[str, Allow] = field(default_factory=dict)
    protected: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    def allows(self, service: str) -> Allow:
        """What ``service`` may ask: ``allow`` with its own allowances added."""
        own = self.services.get(service)
        if own is None:
            return self.allow
        every = self.allow
        return Allow(
            every.privileged or own.privileged,
            every.host_namespaces | own.host_namespaces,
            every.cap_add | own.cap_add,
            every.devices | own.devices,
            every.security_opt | own.security_opt,
            every.sysctls | own.sysctls,
            every.cgroup_parent | own.cgroup_parent,
            every.bind_roots + own.bind_roots,
            every.providers | own.providers,
            every.log_drivers | own.log_drivers,
            min(every.oom_score_adj, own.oom_score_adj),
            every.read_only_files | own.read_only_files,
        )


@dataclass(frozen=True, order=True)
class Violation:
    """One fault: the service (or ``compose``), the key, what it asks, the config line that
    would allow it (empty when nothing may) and, for a rule of the bundle contract, how the
    bundle writes it instead (``rewrite``: OPERATIONS.md, "Writing a bundle")."""

    service: str
    key: str
    asks: str
    allow_with: str = ""
    code: Code = Code.POLICY_REFUSED
    rewrite: str = ""

    def line(self) -> str:
        fix = f"allow with {self.allow_with}" if self.allow_with else "no allowance permits it"
        if self.rewrite:
            fix += f"; write instead: {self.rewrite}"
        if self.key.startswith(f"services.{self.service}."):  # a key path names its service
            return f"{self.key} {self.asks} ({fix})"
        where = f"service {self.service}" if self.service else "the compose file"
        return f"{where}: {self.key} {self.asks} ({fix})"


class Refusal(DeployError):
    """A refusal made of ``Violation``s (the policy's, the bundle contract's): its detail is
    their lines, and ``violations`` keeps them whole (``bundle check --format json``)."""

    def __init__(
        self, message: str, *, code: Code, hint: str, violations: Iterable[Violation]
    ) -> None:
        self.violations = tuple(violations)
        super().__init__(
            message, code=code, hint=hint, detail="\n".join(v.line() for v in self.violations)
        )


# The bundle contract's rewrites (OPERATIONS.md, "Writing a bundle": your compose file has X,
# write Y): what a refusal for one of its rules suggests.
REWRITE_BIND = (
    "a named volume (`data:/data` with `volumes: {data: {}}`), or for a file the app reads a "
    "config with `content:` (`configs: {app.conf: {content: ...}}`)"
)
REWRITE_FROM_ENV = (
    "`secrets.<name>.environment: VAR`, VAR from the release's .env (a manifest entry fills it "
    "from OpenBao)"
)
REWRITE_CONFIG = "`configs.<name>.content: ...` (the file's text in the compose file)"
REWRITE_ENV_FILE = (
    "`env_file: [.env]` (the release's .env, rendered from env_template), or the variables "
    "in `environment:`"
)
REWRITE_FLATTEN = (
    "one flattened compose file (`docker compose -f compose.yaml config --no-interpolate` "
    "prints it)"
)
REWRITE_NAMES = (
    "drop `external:` and `name:` (compose names it <project>_<name>, the release's own)"
)
REWRITE_BUILD = (
    "build the image in the release pipeline, push it to the bundle's registry and name it in "
    "`image:` (a box has no build context)"
)
# Protected trees a read-only bind of one file (read_only_files) may reach; never the agent's
# own directories, the engine's sockets or its data, which are protected paths of their own.
FILE_TREES = ("/etc",)


def normpath(path: str) -> str:
    """``path`` lexically normalized: ``..``, ``.``, doubled and trailing slashes."""
    norm = posixpath.normpath(path)
    return "/" if norm == "//" else norm


def inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (both normalized absolute paths)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def scope_line(service: str, key: str, value: str) -> str:
    """The config.yaml line that allows ``value`` of ``key`` for ``service`` (every service:
    ``policy.allow``, when the ask belongs to none, "")."""
    scope = f"services.{service}" if service else "allow"
    return f"policy.{scope}.{key}: [{value}]"


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _names(value: object) -> list[str]:
    return [str(v) for v in _list(value)]


def capability(name: str) -> str:
    """A capability as compose passes it to the engine: upper case, no ``CAP_`` prefix."""
    upper = name.strip().upper()
    return upper[4:] if upper.startswith("CAP_") else upper


def security_opt(text: str) -> str:
    """A ``security_opt`` as the engine reads it: ``apparmor:x`` is ``apparmor=x``."""
    key, sep, value = text.strip().partition("=")
    if not sep:
        key, sep, value = text.strip().partition(":")
    return f"{key.lower()}={value}" if sep else key.lower()


_REWRITES = {
    "secrets": REWRITE_FROM_ENV,
    "build.secrets": REWRITE_FROM_ENV,
    "configs": REWRITE_CONFIG,
}


def _guards(rules: Rules, forms: set[str]) -> list[tuple[str, str]]:
    """``(form, protected path)`` for each form reaching a protected path (itself, below it or
    above it)."""
    return [
        (form, guarded)
        for form in sorted(forms)
        for guarded in rules.protected
        if (guarded != "/" and inside(form, guarded)) or inside(guarded, form)
    ]


def _one_file(found: HostPath, forms: set[str], hits: list[tuple[str, str]]) -> bool:
    """A read-only bind of one path whose every protected hit lies in ``FILE_TREES`` (not the
    agent's own files, the engine's sockets or data): what ``read_only_files`` may allow."""
    return (
        found.read_only
        and not found.path.endswith("/")
        and all(guarded in FILE_TREES and form != guarded for form, guarded in hits)
    )


def _bind(rules: Rules, found: HostPath, resolved: str, release_dir: str) -> Violation | None:
    """The one host-path judge: a protected path never (but one protected file, read-only,
    that ``read_only_files`` names exactly); a build's path inside the release; else under an
    allowed root."""
    from monky_deployd.core.policy_host import within_release

    service, key, path = found.service, found.key, found.path
    rewrite = _REWRITES.get(key, "")
    forms = {normpath(path), normpath(resolved)}
    if not path.startswith("/"):
        return Violation(service, key, f"{path} {RELATIVE}", rewrite=rewrite)
    if any(not f.startswith("/") for f in forms):
        why = "not an absolute path, or one whose links this agent cannot follow"
        return Violation(service, key, f"{path} ({why})")
    if within_release(found, forms, release_dir):
        return None
    may = rules.allows(service)
    hits = _guards(rules, forms)
    single = _one_file(found, forms, hits)
    if single and forms <= may.read_only_files:
        return None
    if hits:
        form, guarded = hits[0]
        shown = path if form == normpath(path) else f"{path} (-> {form})"
        line = scope_line(service, "read_only_files", normpath(path)) if single else ""
        asks = f"{shown} reaches {guarded}" + (" (read-only, one file)" if single else "")
        return Violation(service, key, asks, line, code=Code.POLICY_PROTECTED_PATH, rewrite=rewrite)
    roots = [normpath(r) for r in may.bind_roots]
    if all(any(inside(f, r) for r in roots) for f in forms):
        return None
    shown = path if normpath(resolved) == normpath(path) else f"{path} (-> {normpath(resolved)})"
    parent = posixpath.dirname(normpath(resolved)) or "/"
    parent = normpath(resolved) if parent == "/" else parent  # "/" is no root to allow
    line = scope_line(service, "bind_roots", parent)
    return Violation(service, key, f"{shown} is outside the allowed roots", line, rewrite=rewrite)


def judge(
    config: Mapping[str, object],
    rules: Rules,
    resolved: Mapping[str, str] | None = None,
    release_dir: str = "/",
) -> list[Violation]:
    """Every violation of ``rules`` in ``config`` (compose's effective configuration as JSON),
    sorted; ``resolved`` maps a bind mount's host path to its real path (symlinks followed; a
    ``config`` pinned to those real paths is judged with the paths as written too);
    ``release_dir`` is the project directory (its ``.env`` is the one ``env_file`` allowed)."""
    from monky_deployd.core import policy_host, policy_keys

    seen = resolved or {}
    found = [
        Violation(f.service, f.path, _key_asks(f), f"policy.keys: [{f.path}]", f.code)
        for f in policy_keys.walk(config, rules.keys)
    ]
    services = config.get("services")
    for name, svc in sorted(services.items()) if isinstance(services, dict) else ():
        if isinstance(svc, dict):
            found.extend(_service(str(name), svc, rules))
            found.extend(_outside_cgroup(str(name), svc, rules))
            found.extend(policy_host.service(str(name), svc, rules))
            found.extend(_env_files(str(name), svc, normpath(release_dir + "/.env")))
            found.extend(_build_only(str(name), svc))
    found.extend(policy_host.volumes(config, rules))
    found.extend(policy_host.networks(config, rules))
    # a model pinned to what was resolved (core.artifact.pinned) names the real path: the path
    # as the bundle wrote it is judged with it, and named first
    written = {real: path for path, real in seen.items() if real and real != path}
    for host_path in policy_host.host_paths(config):
        path = host_path.path
        if path not in seen and path in written:
            host_path, real = host_path._replace(path=written[path]), path
        else:
            real = seen.get(path, path)
        hit = _bind(rules, host_path, real, release_dir)
        if hit is not None:
            found.append(hit)
    return sorted(set(found))


def _key_asks(fault: KeyFault) -> str:
    if fault.why:
        return f"is refused by default ({fault.why})"
    return "is a key this agent's policy does not know (compose may act on it; nothing judged it)"


def _service(name: str, svc: Mapping[str, object], rules: Rules) -> Iterable[Violation]:
    may = rules.allows(name)
    if svc.get("privileged") is True and not may.privileged:
        yield Violation(name, "privileged", "true", f"policy.services.{name}.privileged: true")
    for key, ns in HOST_NAMESPACE_KEYS.items():
        if str(svc.get(key, "")).lower() == "host" and ns not in may.host_namespaces:
            yield Violation(name, key, "host", scope_line(name, "host_namespaces", ns))
    for raw in _names(svc.get("cap_add")):
        cap = capability(raw)
        if cap not in BASELINE_CAPS and cap not in may.cap_add:
            yield Violation(name, "cap_add", cap, scope_line(name, "cap_add", cap))
    for dev in _list(svc.get("devices")):
        src = str(dev.get("source", "")) if isinstance(dev, dict) else str(dev).split(":")[0]
        if normpath(src) not in may.devices:
            yield Violation(name, "devices", src, scope_line(name, "devices", normpath(src)))
    for key, request in _device_requests(svc):
        if GPU not in may.devices:
            yield Violation(name, key, request, scope_line(name, "devices", GPU))
    for rule in _names(svc.get("device_cgroup_rules")):
        if rule not in may.devices:
            yield Violation(name, "device_cgroup_rules", rule, scope_line(name, "devices", rule))
    for raw in _names(svc.get("security_opt")):
        opt = security_opt(raw)
        if _unsafe_opt(opt) and opt not in may.security_opt:
            yield Violation(name, "security_opt", raw, scope_line(name, "security_opt", opt))
    for key in _sysctl_names(svc.get("sysctls")):
        if key not in SAFE_SYSCTLS and key not in may.sysctls:
            yield Violation(name, "sysctls", key, scope_line(name, "sysctls", key))
    for source in _names(svc.get("volumes_from")):
        if source.startswith("container:"):  # another container's mounts, of any project
            yield Violation(name, "volumes_from", source.rsplit(":ro", 1)[0].rsplit(":rw", 1)[0])
    for key in ("network_mode", "pid", "ipc"):  # another container's namespace, of any project
        if str(svc.get(key, "")).startswith("container:"):
            yield Violation(name, key, str(svc[key]))
    if isinstance(build := svc.get("build"), dict):
        yield from _build(name, build, may)
    parent = svc.get("cgroup_parent")
    if parent and str(parent) not in may.cgroup_parent:
        yield Violation(
            name, "cgroup_parent", str(parent), scope_line(name, "cgroup_parent", str(parent))
        )


def _scalar_line(service: str, key: str, value: object) -> str:
    """The config.yaml line of a one-value allowance (``oom_score_adj: -500``)."""
    scope = f"services.{service}" if service else "allow"
    return f"policy.{scope}.{key}: {value}"


def _int(value: object) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _outside_cgroup(name: str, svc: Mapping[str, object], rules: Rules) -> Iterable[Violation]:
    """What a service asks that acts beyond its own namespaces and cgroup: a log driver (the
    engine runs it in the host's network namespace), an OOM score that makes the host's OOM
    killer spare it, a real-time priority limit, a host block device's I/O weight or limit."""
    may = rules.allows(name)
    yield from _logging(name, svc.get("logging"), may)
    score = svc.get("oom_score_adj")
    adj = _int(score) if score is not None else 0
    if adj is None:
        yield Violation(name, "oom_score_adj", f"{score} (not a number)")
    elif adj < may.oom_score_adj:
        yield Violation(
            name,
            "oom_score_adj",
            f"{adj} (the host's OOM killer spares the container over host processes)",
            _scalar_line(name, "oom_score_adj", adj),
        )
    yield from _ulimits(name, "ulimits", svc.get("ulimits"), rules)
    build = svc.get("build")
    if isinstance(build, dict):
        yield from _ulimits(name, "build.ulimits", build.get("ulimits"), rules)
    yield from _blkio(name, svc.get("blkio_config"), may)


def _logging(name: str, logging: object, may: Allow) -> Iterable[Violation]:
    """``logging``: a local driver (or none named: the engine's default) with the options of
    ``LOG_OPTIONS`` only, unless ``log_drivers`` names the driver."""
    if not isinstance(logging, dict):
        return
    driver = logging.get("driver")
    driver = str(driver).strip() if driver not in (None, "") else ""
    if driver and driver in may.log_drivers:
        return
    if driver and driver not in LOCAL_LOG_DRIVERS:
        yield Violation(
            name,
            "logging.driver",
            f"{driver} (a log driver runs in the engine, in the host's network namespace: it "
            "reaches the host's sockets and addresses whatever the container's network)",
            scope_line(name, "log_drivers", driver),
        )
        return
    options = logging.get("options")
    for opt in sorted(str(k) for k in options) if isinstance(options, dict) else ():
        if opt in LOG_OPTIONS:
            continue
        whose = f"the log driver {driver}" if driver else "the engine's default log driver"
        asks = (
            f"is not an option of the engine's local log drivers (for {whose}; it may name a "
            "host address, path or socket)"
        )
        if driver:
            yield Violation(
                name, f"logging.options.{opt}", asks, scope_line(name, "log_drivers", driver)
            )
        else:
            yield Violation(
                name,
                f"logging.options.{opt}",
                asks + ": name its driver in logging.driver, then allow it with log_drivers",
            )


# rlimits whose effect leaves the container's cgroup: a real-time priority (RLIMIT_RTPRIO
# lets an unprivileged process take SCHED_FIFO/SCHED_RR, which preempts every host process)
ULIMITS_BEYOND_CGROUP = frozenset({"rtprio"})


def _ulimits(name: str, key: str, value: object, rules: Rules) -> Iterable[Violation]:
    """``ulimits`` (a service's or its build's): ``rtprio`` above 0 unless ``policy.keys``
    names ``services.<name>.<key>.rtprio``."""
    from monky_deployd.core.policy_keys import allowed_by

    for limit, spec in sorted(value.items()) if isinstance(value, dict) else ():
        if str(limit) not in ULIMITS_BEYOND_CGROUP:
            continue
        parts = [spec] if not isinstance(spec, dict) else [spec.get("soft"), spec.get("hard")]
        if all(p is None or _int(p) == 0 for p in parts):
            continue
        path = f"services.{name}.{key}.{limit}"
        if not allowed_by(path, rules.keys):
            yield Violation(
                name,
                path,
                f"{spec} (a real-time priority: its processes preempt every host process, "
                "beyond the container's CPU limits)",
                f"policy.keys: [{path}]",
            )


_BLKIO_DEVICES = (
    *("weight_device", "device_read_bps", "device_write_bps"),
    *("device_read_iops", "device_write_iops"),
)


def _blkio(name: str, value: object, may: Allow) -> Iterable[Violation]:
    """``blkio_config``: ``weight`` is the container's own cgroup; a per-device entry names a
    host block device (the engine looks it up by path on the host): it needs ``devices``."""
    if not isinstance(value, dict):
        return
    for key in _BLKIO_DEVICES:
        for entry in _list(value.get(key)):
            path = str(entry.get("path", "")) if isinstance(entry, dict) else str(entry)
            if not path.startswith("/"):
                yield Violation(name, f"blkio_config.{key}", f"{path} {RELATIVE}")
            elif normpath(path) not in may.devices:
                yield Violation(
                    name,
                    f"blkio_config.{key}",
                    f"{path} (a host block device)",
                    scope_line(name, "devices", normpath(path)),
                )


def _device_requests(svc: Mapping[str, object]) -> Iterable[tuple[str, str]]:
    """``(key, request)`` for each device request (the engine's GPUs and the like: ``gpus``,
    ``deploy.resources.reservations.devices``), as ``driver=.. count=.. capabilities=..``."""
    deploy = svc.get("deploy")
    resources = deploy.get("resources") if isinstance(deploy, dict) else None
    reserved = resources.get("reservations") if isinstance(resources, dict) else None
    found = [("gpus", r) for r in _list(svc.get("gpus"))]
    if isinstance(reserved, dict):
        found += [
            ("deploy.resources.reservations.devices", r) for r in _list(reserved.get("devices"))
        ]
    for key, request in found:
        words = request.items() if isinstance(request, dict) else [("request", request)]
        text = " ".join(
            f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in sorted(words)
        )
        yield key, text or "(any)"


def _build(name: str, build: Mapping[str, object], may: Allow) -> Iterable[Violation]:
    """A ``build`` (``up`` builds on the box when the image is missing): a privileged build
    container or the host's network as ``privileged`` and ``host_namespaces: [network]``
    allow them; a BuildKit entitlement or the agent's SSH agent or keys forwarded
    (``ssh``) with no allowance."""
    if build.get("privileged") is True and not may.privileged:
        yield Violation(
            name, "build.privileged", "true", f"policy.services.{name}.privileged: true"
        )
    if str(build.get("network", "")).lower() == "host" and "network" not in may.host_namespaces:
        yield Violation(
            name, "build.network", "host", scope_line(name, "host_namespaces", "network")
        )
    for entitlement in _names(build.get("entitlements")):
        yield Violation(name, "build.entitlements", entitlement)
    for ssh in _names(build.get("ssh")):
        yield Violation(name, "build.ssh", ssh)


def _env_files(name: str, svc: Mapping[str, object], dotenv: str) -> Iterable[Violation]:
    """``env_file`` (compose reads it into the container's environment): the release's .env
    only."""
    for env_file in _list(svc.get("env_file")):
        path = str(env_file.get("path") if isinstance(env_file, dict) else env_file)
        if normpath(path) != dotenv:
            yield Violation(
                name,
                "env_file",
                f"{path} is not the release's .env",
                code=SOURCE,
                rewrite=REWRITE_ENV_FILE,
            )


def _build_only(name: str, svc: Mapping[str, object]) -> Iterable[Violation]:
    """A service with ``build`` and no ``image`` (BUNDLE_BUILD_ONLY): a bundle ships no build
    context, so no box can build it and ``up`` would fail after the pull."""
    if svc.get("build") is not None and not svc.get("image"):
        yield Violation(
            name,
            "build",
            "has no image: a bundle ships no build context, so no box can build it",
            code=Code.BUNDLE_BUILD_ONLY,
            rewrite=REWRITE_BUILD,
        )


def _unsafe_opt(opt: str) -> bool:
    """An option baseline refuses: a confinement turned off, a profile from a host file
    (seccomp=<path>), an SELinux user or role. ``no-new-privileges``, an AppArmor profile by
    name and an SELinux level or type are allowed."""
    key, _, value = opt.partition("=")
    if opt in UNCONFINED_OPTS:
        return True
    if key == "no-new-privileges":
        return False
    if key == "apparmor":
        return not value
    if key == "label":
        return not value.startswith(("level:", "type:"))
    return True


def _sysctl_names(value: object) -> list[str]:
    if isinstance(value, dict):
        return sorted(str(k) for k in value)
    return sorted(str(v).partition("=")[0].strip() for v in _names(value))


def sources(doc: object) -> list[Violation]:
    """What compose would read from outside the release while resolving the compose file (its
    own YAML, before compose runs): ``include``, ``extends`` of another file, ``label_file``.
    The release is one compose file and its ``.env``: any other file, local or remote, is
    outside it."""
    if not isinstance(doc, dict):
        return []
    found: list[Violation] = []
    if doc.get("include"):
        found.append(
            Violation(
                "",
                "include",
                "names files outside the release",
                code=SOURCE,
                rewrite=REWRITE_FLATTEN,
            )
        )
    services = doc.get("services")
    for name, svc in sorted(services.items()) if isinstance(services, dict) else ():
        if not isinstance(svc, dict):
            continue
        ext = svc.get("extends")
        if isinstance(ext, dict) and ext.get("file"):
            found.append(
                Violation(
                    str(name),
                    "extends.file",
                    f"{ext['file']} (a file outside the release)",
                    code=SOURCE,
                    rewrite=REWRITE_FLATTEN,
                )
            )
        if svc.get("label_file"):
            found.append(Violation(str(name), "label_file", "reads a host file", code=SOURCE))
    return found


# the order a refusal's code is chosen in: what nothing may allow first
_GRAVITY = (
    Code.POLICY_PROTECTED_PATH,
    Code.POLICY_SWAPPABLE_PATH,
    Code.POLICY_SOURCE,
    Code.BUNDLE_BUILD_ONLY,
    Code.POLICY_UNKNOWN_KEY,
    Code.POLICY_REFUSED,
)


def ordered(violations: Iterable[Violation]) -> list[Violation]:
    """``violations`` in a refusal's order: the gravest code's first."""
    return sorted(violations, key=lambda v: (_GRAVITY.index(v.code), v))


def refusal(revision: str, violations: list[Violation]) -> Refusal:
    """The one error for ``violations`` (not empty): the gravest code, its faults first, one
    line per violation."""
    found = ordered(violations)
    code = found[0].code
    first = found[0].line()
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return Refusal(
        f"revision {revision} is refused by this box's policy: {first}{more}; nothing was "
        "changed, the running revision keeps running",
        code=code,
        hint="each line below names the service, the key and the config.yaml line that would "
        'allow it (OPERATIONS.md, "Local policy"), or how to write it in the bundle '
        '("Writing a bundle"); `monky-deployd bundle check` shows them before publishing',
        violations=found,
    )
