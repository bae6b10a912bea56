"""The local policy's terms: the allowances (``Allow``: opt-in, narrow; ``Rules``: config.yaml's
``policy:`` as the judges read it, with the paths refused whatever it says), one fault
(``Violation``: its line names the config line that would allow it), Pod Security baseline's
sets (capabilities, sysctls, host namespaces, local log drivers) and the path and name helpers
every judge shares. Pure. The judges are ``core.admission.policy``, ``.host``, ``.names`` and
``.artifact``'s.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

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
    volumes: frozenset[str] = frozenset()  # engine names: another project's or made by hand
    networks: frozenset[str] = frozenset()  # engine names (also network_mode, build.network)
    log_drivers: frozenset[str] = frozenset()  # log drivers beyond LOCAL_LOG_DRIVERS
    oom_score_adj: int = 0  # the lowest oom_score_adj a service may ask (-1000..0)
    # protected files a read-only bind may name exactly (/etc/localtime): regular files only,
    # each as written and with its links resolved (``agent.policy`` drops any other entry)
    read_only_files: frozenset[str] = frozenset()
    build: bool = False  # ``build:``: the agent copies each context, compose builds the copy
    # the highest weights a service may ask (0: the engine's default, ``CPU_SHARES_DEFAULT`` /
    # ``Rules.blkio_default``): above it, the container takes CPU or disk time from the others
    cpu_shares: int = 0
    blkio_weight: int = 0


# The engine's default CPU weight (``cpu_shares`` unset runs as 1024 on cgroup v1; on v2 runc
# maps 1024 to cpu.weight 39, below the default 100): a service asks no more than this unless
# the ``cpu_shares`` allowance says so.
CPU_SHARES_DEFAULT = 1024
# The block-I/O weight a service may ask without an allowance, by the engine's cgroup version:
# v1's default blkio.weight is 500; on v2 runc maps a weight w to io.weight 1+(w-10)*9999/990
# (io.bfq.weight: w itself), whose default is 100: 19 is the highest weight not above it.
BLKIO_DEFAULT = {"1": 500, "2": 19}


@dataclass(frozen=True)
class Rules:
    """The policy: ``allow`` for every service, ``services`` for one by name, the paths no
    bind mount may reach (``protected``: normalized absolute paths, symlinks resolved too), and
    the key paths allowed beyond the key table's defaults (``keys``: ``policy.keys``)."""

    allow: Allow = Allow()
    services: Mapping[str, Allow] = field(default_factory=dict)
    protected: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    blkio_default: int = BLKIO_DEFAULT["2"]  # the engine's (agent.policy asks its cgroup version)

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
            every.volumes | own.volumes,
            every.networks | own.networks,
            every.log_drivers | own.log_drivers,
            min(every.oom_score_adj, own.oom_score_adj),
            every.read_only_files | own.read_only_files,
            every.build or own.build,
            max(every.cpu_shares, own.cpu_shares),
            max(every.blkio_weight, own.blkio_weight),
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
REWRITE_CONFIG = (
    "`configs.<name>.content: ...` (the file's text in the compose file; compose interpolates "
    "it: write each `$` in it as `$$`)"
)
REWRITE_ENV_FILE = (
    "`env_file: [.env]` (the release's .env, rendered from env_template), or the variables "
    "in `environment:`"
)
REWRITE_FLATTEN = (
    "one flattened compose file (`docker compose -f compose.yaml config --no-interpolate "
    "--no-path-resolution --no-normalize` prints it, each `${VAR}` and relative path as "
    "written, no project or network name of the checkout's directory; it prints a "
    "bind led by a variable, `${DATA}:/data`, as `type: volume`: write `type: bind` there)"
)
REWRITE_NAMES = (
    "drop `external:` and `name:` (compose names it <project>_<name>, the release's own)"
)
REWRITE_BUILD = (
    "build the image in the release pipeline, push it to the bundle's registry and name it in "
    "`image:` (a box has no build context)"
)
REWRITE_PULL = (
    "build the image in the release pipeline, push it to the bundle's registry, name it in "
    "`image:` and drop `build:` (a deploy agent pulls)"
)
REWRITE_TAG = (
    "an image name of this project's own for what it builds (`image: "
    "<registry>/<project>/<service>:<tag>`, a repository only this app uses)"
)
REWRITE_DEV = (
    "the device itself in `devices:` (`devices: [/dev/ttyACM0]`, which "
    "`policy.services.<name>.devices` allows on a box); the engine makes its node in the "
    "container"
)
REWRITE_ETC = (
    "for data the app writes, a named volume at the same target (`app-data:<target>` with "
    "`volumes: {app-data: {}}`); for config files it reads, one config each "
    "(`configs: {<file>: {content: ...}}`, `target:` the file's path; each `$` written `$$`); or "
    "a host directory outside /etc under the box's bind_roots (/srv/<app>/...)"
)
# where a bind's target says it holds the app's code (a named volume would keep the first
# image's code forever), and the folders apps read configuration from
_CODE_TARGETS = ("/app", "/src", "/code", "/usr/src/app", "/var/www", "/var/www/html", "/workspace")
_CODE_SOURCES = (".", "./")
_CODE_LEAVES = ("src", "app", "code", "lib", "www", "html", "public")
_DATA_WORDS = (
    *("data", "db", "database", "postgres", "mysql", "mariadb", "redis", "log", "upload"),
    *("media", "cache", "storage", "state", "backup", "export", "consume", "library", "files"),
)


def bind_rewrite(source: str, target: str) -> str:
    """How a bundle writes a relative bind ``source:target`` instead, by what it holds: the
    app's code (its image), one file (a config), a folder of config files (a config each), or
    data (a named volume); each also as an absolute host path written out."""
    src, dst = source.rstrip("/") or source, target.rstrip("/") or "/"
    leaf = posixpath.basename(src)
    # the volume's name from the folder's own: two binds rewritten get two volumes
    # (its path's words: ./ha/config and ./mqtt/config are two volumes, not one)
    vol = re.sub(r"[^a-z0-9_-]+", "-", src.lower().lstrip("./~$")).strip("-_") or "data"
    words = (leaf.lower(), posixpath.basename(dst).lower())
    code_dir = dst in _CODE_TARGETS or posixpath.dirname(dst) in _CODE_TARGETS  # and its files
    if src in _CODE_SOURCES or code_dir or leaf in _CODE_LEAVES:
        how = (
            f"the app's code in its image: copy it in the Dockerfile (`COPY {src} {dst}`), "
            "build and push the image in the release pipeline and name it in `image:` (a "
            "named volume would keep the first image's code forever)"
        )
    elif any("." in w.lstrip(".") and not w.endswith(".d") for w in words):  # one file
        how = (
            f"a config with the file's text: `configs: {{{leaf or 'app.conf'}: {{content: ...}}}}` "
            f"and `configs: [{{source: {leaf or 'app.conf'}, target: {dst}}}]` in the service "
            "(each `$` in it written `$$`)"
        )
    elif any(w in name for w in _DATA_WORDS for name in words) and not inside(dst, "/etc"):
        how = f"a named volume (`{vol}:{dst}` with `volumes: {{{vol}: {{}}}}`)"
    else:  # a folder: what the app writes there, or files shipped with it (a volume starts empty)
        how = (
            f"for what the app writes there (a database, state), a named volume (`{vol}:{dst}` "
            f"with `volumes: {{{vol}: {{}}}}`); for files shipped with the app (config, "
            "dashboards, templates: a new named volume starts empty), one config per file "
            f"(`configs: {{a.conf: {{content: ...}}}}`, each with `target: {dst}/a.conf`; each "
            "`$` written `$$`) or the files copied into the image in the release pipeline"
        )
    return how + ", or an absolute host path written out (/srv/app/data)"


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
