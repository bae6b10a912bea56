"""The local policy's allow-list: every key compose's effective model can hold, classified. Pure.

``docker compose config --format json`` is what ``up`` acts on, and compose grows keys with its
releases (``provider``, hooks, ``models``): a policy that lists what to refuse is one release
behind. So every key at every level is in ``SHAPES``, each one of:

- ``JUDGED``: a judge of ``core.admission.policy`` reads its value (``JUDGES`` names them);
- ``ALLOWED``: allowed as it is, with one line on why it cannot reach the host;
- ``REFUSED``: refused unless config.yaml's ``policy.keys`` names its path.

A key the table does not know is refused (POLICY_UNKNOWN_KEY) naming its path: an upgraded
compose that learns a key fails closed. ``x-`` keys are compose's extensions (it never acts on
them) and a ``null`` value asks nothing. ``core.admission.keywalk`` walks a model
against it; ``markdown`` is OPERATIONS.md's table (tests/repo/test_policy_table.py holds the two
together, and every property of compose's own JSON schema to this table).

One table, so that a key has one verdict in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    JUDGED = "judged"
    ALLOWED = "allowed"
    REFUSED = "refused"


@dataclass(frozen=True)
class Key:
    """One key: its kind, why (the judge's name for ``JUDGED``), and the shape of its value
    when the walk goes on into it (``named``: a mapping of names, each of that shape; a list's
    items are of the shape too). No shape: its value is data (a command, a map of labels)."""

    kind: Kind
    why: str
    shape: str = ""
    named: bool = False


# the judges of core.admission.policy, by the name the table gives them
JUDGES = {
    "privileged": "privileged needs the privileged allowance",
    "namespaces": "host (needs host_namespaces) or container:<x> (never) namespaces; "
    "network_mode naming a network not the release's own needs networks",
    "capabilities": "beyond baseline's default set needs cap_add",
    "devices": "host devices, device cgroup rules, device requests, block devices need devices",
    "security_opt": "a confinement turned off needs security_opt",
    "sysctls": "beyond baseline's safe set needs sysctls",
    "cgroup_parent": "needs cgroup_parent",
    "host_paths": "every host path: protected paths never, else under bind_roots",
    "env_file": "the release's .env only",
    "sources": "files outside the release: refused before compose runs",
    "volumes_from": "another container's mounts: never; a service of the release: judged",
    "build": "needs build (the context copied, compose builds the copy); privileged, network "
    "(as network_mode), entitlements, ssh; secrets and caches from host paths: never",
    "networks": "the host's or another project's network (its engine label), a driver beyond "
    "bridge",
    "volumes": "a driver beyond local, driver_opts, another project's volume (its engine label)",
    "build_cache": "an image reference is allowed; type=local or a path: a host path; "
    "another backend (gha, s3) needs keys",
    "provider": "a program compose runs on the host: needs providers",
    "hooks": "judged as their service (privileged)",
    "engine_socket": "the engine's API socket in the container: never",
    "propagation": "shared or rshared (the container's mounts appear on the host) needs keys",
    "names": "a container of that name another project's or made by hand: never",
    "logging": "json-file, local, journald, none with their own options; else log_drivers",
    "oom_score_adj": "below 0 (the host's OOM killer spares it) needs oom_score_adj",
    "ulimits": "rtprio (real-time, preempts the host) needs keys; the rest is the container's",
    "weights": "a weight above the engine's default (cpu_shares 1024, the block-I/O weight: "
    "500 on cgroup v1, 19 on v2) takes time from every other container: needs cpu_shares / "
    "blkio_weight; a block device needs devices",
}


def _j(judge: str, shape: str = "", named: bool = False) -> Key:
    assert judge in JUDGES, judge
    return Key(Kind.JUDGED, judge, shape, named)


def _a(why: str, shape: str = "", named: bool = False) -> Key:
    return Key(Kind.ALLOWED, why, shape, named)


def _r(why: str) -> Key:
    return Key(Kind.REFUSED, why)


_LIMIT = "a limit on the container's own cgroup"
_META = "metadata: compose and the engine store it, nothing runs from it"
_INSIDE = "runs or applies inside the container"
_SWARM = "swarm only: compose without swarm does not act on it"
_NAMED = "compose's own name for it (checked by its judge)"
_RT = "a real-time CPU budget: real-time tasks preempt every host process"

# keys shared by a service, a job and a pre_start hook (compose-spec's container_spec)
_CONTAINER: dict[str, Key] = {
    "annotations": _r("OCI annotations a runtime acts on (runc's org.systemd.property.*)"),
    "blkio_config": _j("weights"),
    "cap_add": _j("capabilities"),
    "cap_drop": _a("only removes capabilities"),
    "cgroup": _j("namespaces"),
    "cgroup_parent": _j("cgroup_parent"),
    "command": _a(_INSIDE),
    "configs": _j("host_paths", "file_ref"),
    "cpu_count": _a(_LIMIT),
    "cpu_percent": _a(_LIMIT),
    "cpu_period": _a(_LIMIT),
    "cpu_quota": _a(_LIMIT),
    "cpu_rt_period": _r(_RT),
    "cpu_rt_runtime": _r(_RT),
    "cpu_shares": _j("weights"),
    "cpus": _a(_LIMIT),
    "cpuset": _a(_LIMIT),
    "credential_spec": _r("Windows only: reads a host file or the host's registry"),
    "device_cgroup_rules": _j("devices"),
    "devices": _j("devices"),
    "dns": _a("the container's own resolver"),
    "dns_opt": _a("the container's own resolver"),
    "dns_search": _a("the container's own resolver"),
    "domainname": _a("the container's own UTS namespace"),
    "entrypoint": _a(_INSIDE),
    "env_file": _j("env_file"),
    "environment": _a(_INSIDE),
    "extra_hosts": _a("the container's own /etc/hosts"),
    "gpus": _j("devices"),
    "group_add": _a("supplementary groups inside the container"),
    "hostname": _a("the container's own UTS namespace"),
    "image": _a("pulled with the agent's credential and run as a container"),
    "init": _a("the engine's init binary as the container's PID 1, in its namespaces"),
    "ipc": _j("namespaces"),
    "isolation": _a("Windows isolation; on Linux only 'default' starts"),
    "label_file": _j("sources"),
    "labels": _a("metadata: compose sets its com.docker.compose.* labels over the bundle's"),
    "logging": _j("logging"),
    "mac_address": _a("the container's own interface"),
    "mem_limit": _a(_LIMIT),
    "mem_reservation": _a(_LIMIT),
    "mem_swappiness": _a(_LIMIT),
    "memswap_limit": _a(_LIMIT),
    "models": _r("Docker Model Runner: a model served by a host component"),
    "network_mode": _j("namespaces"),
    "networks": _j("networks", "service_network", named=True),
    "oom_kill_disable": _r("a container the OOM killer spares can starve the host"),
    "oom_score_adj": _j("oom_score_adj"),
    "pid": _j("namespaces"),
    "pids_limit": _a(_LIMIT),
    "platform": _a("which image variant is pulled (run in the container's namespaces)"),
    "privileged": _j("privileged"),
    "pull_policy": _a("when compose pulls the image (build: the build is judged)"),
    "pull_refresh_after": _a("when compose pulls the image"),
    "read_only": _a("the container's own root filesystem"),
    "runtime": _r("another OCI runtime installed on the host, with its own isolation"),
    "secrets": _j("host_paths", "file_ref"),
    "security_opt": _j("security_opt"),
    "shm_size": _a(_LIMIT),
    "stop_grace_period": _a("how long the engine waits on stop"),
    "stop_signal": _a("the signal sent to the container on stop"),
    "storage_opt": _a("the size of the container's own writable layer"),
    "sysctls": _j("sysctls"),
    "tmpfs": _a("memory-backed, inside the container"),
    "ulimits": _j("ulimits"),
    "use_api_socket": _j("engine_socket"),
    "user": _a("the user inside the container (its user namespace as the engine's)"),
    "userns_mode": _j("namespaces"),
    "uts": _j("namespaces"),
    "volumes": _j("host_paths", "mount"),
    "volumes_from": _j("volumes_from"),
    "working_dir": _a(_INSIDE),
}
# keys of what compose builds and runs (compose-spec's workload_spec)
_WORKLOAD: dict[str, Key] = {
    "build": _j("build", "build"),
    "depends_on": _a("the order compose starts the release's services in", "depends", True),
    "expose": _a(_META),
    "healthcheck": _a(_INSIDE, "healthcheck"),
    "ports": _a("the host reaches the container's port, not the container the host", "port"),
    "stdin_open": _a(_INSIDE),
    "tty": _a(_INSIDE),
}
_HOOK = {
    "command": _a(_INSIDE),
    "environment": _a(_INSIDE),
    "privileged": _j("hooks"),
    "user": _a("the user inside the container"),
    "working_dir": _a(_INSIDE),
}

SHAPES: dict[str, dict[str, Key]] = {
    "top": {
        "configs": _j("host_paths", "config", named=True),
        "include": _j("sources"),
        "jobs": _r("compose's scheduled jobs: run outside the agent's verify and lifecycle"),
        "models": _r("Docker Model Runner: a model served by a host component"),
        "name": _a("the project's name: the agent sets it"),
        "networks": _j("networks", "network", named=True),
        "secrets": _j("host_paths", "secret", named=True),
        "services": _a("the release's services, each judged", "service", named=True),
        "version": _a("ignored by compose"),
        "volumes": _j("volumes", "volume", named=True),
    },
    "service": {
        **_CONTAINER,
        **_WORKLOAD,
        "attach": _a("whether compose attaches to its output"),
        "container_name": _j("names"),
        "deploy": _a("replicas and limits", "deploy"),
        "develop": _a("acted on only by `docker compose watch`, which the agent never runs"),
        "extends": _j("sources"),
        "external_links": _r("links to containers outside the release"),
        "links": _a("names of the release's own services"),
        "post_start": _j("hooks", "hook"),
        "pre_start": _r("a container of its own per hook: not judged yet"),
        "pre_stop": _j("hooks", "hook"),
        "profiles": _a("the agent runs every profile"),
        "provider": _j("provider"),
        "restart": _a("the engine's restart policy for the container"),
        "scale": _a("how many containers"),
    },
    "file_ref": {  # a service's secrets/configs entry: the top-level one's file is judged
        "gid": _a(_INSIDE),
        "mode": _a(_INSIDE),
        "source": _a(_NAMED),
        "target": _a(_INSIDE),
        "uid": _a(_INSIDE),
    },
    "mount": {
        "bind": _a("options of a bind whose source is judged", "bind"),
        "consistency": _a("macOS only"),
        "image": _a("an image's content, read-only", "image_mount"),
        "read_only": _a("only restricts"),
        "source": _j("host_paths"),
        "target": _a(_INSIDE),
        "tmpfs": _a("memory-backed, inside the container", "tmpfs_mount"),
        "type": _j("host_paths"),
        "volume": _a("options of a named volume, judged at the top level", "volume_mount"),
    },
    "bind": {
        "create_host_path": _a("creates the judged source if missing"),
        "propagation": _j("propagation"),
        "recursive": _a("submounts of the judged source"),
        "selinux": _a("relabels the judged source for the container"),
    },
    "volume_mount": {
        "labels": _a(_META),
        "nocopy": _a("does not copy the image's files into the volume"),
        "subpath": _a("a directory inside the named volume"),
    },
    "image_mount": {"subpath": _a("a directory inside the image")},
    "tmpfs_mount": {"mode": _a(_INSIDE), "size": _a(_LIMIT)},
    "service_network": {
        "aliases": _a("names on the release's network"),
        "driver_opts": _r("endpoint options of the network driver (interface sysctls)"),
        "gw_priority": _a("the container's own default route"),
        "interface_name": _a("the container's own interface"),
        "ipv4_address": _a("the container's own address"),
        "ipv6_address": _a("the container's own address"),
        "link_local_ips": _a("the container's own addresses"),
        "mac_address": _a("the container's own interface"),
        "priority": _a("the order networks are connected in"),
    },
    "build": {
        "additional_contexts": _j("host_paths"),
        "args": _a("build arguments"),
        "cache_from": _j("build_cache"),
        "cache_to": _j("build_cache"),
        "context": _j("host_paths"),
        "dockerfile": _j("host_paths"),
        "dockerfile_inline": _a("the Dockerfile written in the bundle"),
        "entitlements": _j("build"),
        "extra_hosts": _a("the build container's /etc/hosts"),
        "isolation": _a("Windows isolation"),
        "labels": _a(_META),
        "network": _j("build"),
        "no_cache": _a("builds without cache"),
        "no_cache_filter": _a("builds stages without cache"),
        "platforms": _a("which platforms are built"),
        "privileged": _j("build"),
        "provenance": _a("an attestation stored with the image"),
        "pull": _a("pulls base images"),
        "sbom": _a("an attestation stored with the image"),
        "secrets": _j("host_paths", "file_ref"),
        "shm_size": _a(_LIMIT),
        "ssh": _j("build"),
        "tags": _r("more names for the built image: another app's image name on the box"),
        "target": _a("the stage built"),
        "ulimits": _j("ulimits"),
    },
    "depends": {
        "condition": _a("when the dependent starts"),
        "required": _a("whether the dependency must exist"),
        "restart": _a("restarts the dependent with it"),
    },
    "healthcheck": {
        "disable": _a(_INSIDE),
        "interval": _a(_INSIDE),
        "retries": _a(_INSIDE),
        "start_interval": _a(_INSIDE),
        "start_period": _a(_INSIDE),
        "test": _a(_INSIDE),
        "timeout": _a(_INSIDE),
    },
    "port": {
        "app_protocol": _a(_META),
        "host_ip": _a("the host address the port is published on"),
        "mode": _a(_SWARM),
        "name": _a(_META),
        "protocol": _a("tcp or udp"),
        "published": _a("the host port"),
        "target": _a("the container port"),
    },
    "deploy": {
        "endpoint_mode": _a(_SWARM),
        "labels": _a(_META),
        "mode": _a(_SWARM),
        "placement": _a(_SWARM),
        "replicas": _a("how many containers"),
        "resources": _a("limits and reservations", "resources"),
        "restart_policy": _a("the engine's restart policy"),
        "rollback_config": _a(_SWARM),
        "update_config": _a(_SWARM),
    },
    "resources": {
        "limits": _a(_LIMIT),
        "reservations": _a("reservations", "reservations"),
    },
    "reservations": {
        "cpus": _a(_LIMIT),
        "devices": _j("devices"),
        "generic_resources": _a(_SWARM),
        "memory": _a(_LIMIT),
    },
    "hook": _HOOK,
    "network": {
        "attachable": _a(_SWARM),
        "driver": _j("networks"),
        "driver_opts": _r("options of the network driver (a host bridge or interface)"),
        "enable_ipv4": _a("the release's network's addressing"),
        "enable_ipv6": _a("the release's network's addressing"),
        "external": _j("networks"),
        "internal": _a("only restricts"),
        "ipam": _r("its subnets become host routes (over the LAN's: shadows it); a driver plugin"),
        "labels": _a(_META),
        "name": _j("networks"),
    },
    "volume": {
        "driver": _j("volumes"),
        "driver_opts": _j("volumes"),
        "external": _j("volumes"),
        "labels": _a(_META),
        "name": _j("volumes"),
    },
    "secret": {
        "driver": _r(_SWARM + " (a secrets plugin on the host)"),
        "driver_opts": _r(_SWARM + " (a secrets plugin on the host)"),
        "environment": _a("a variable of the release's environment (its .env)"),
        "external": _r("a secret of the host's swarm, not the release's"),
        "file": _j("host_paths"),
        "labels": _a(_META),
        "name": _a(_NAMED),
        "template_driver": _r(_SWARM),
    },
    "config": {
        "content": _a("the content written in the bundle"),
        "environment": _a("a variable of the release's environment (its .env)"),
        "external": _r("a config of the host's swarm, not the release's"),
        "file": _j("host_paths"),
        "labels": _a(_META),
        "name": _a(_NAMED),
        "template_driver": _r(_SWARM),
    },
}


def rows() -> list[tuple[str, str, Kind, str]]:
    """The table as (shape, key, kind, why), in order: OPERATIONS.md's rows."""
    out = []
    for shape, table in SHAPES.items():
        for name, key in sorted(table.items()):
            why = f"{JUDGES[key.why]} ({key.why})" if key.kind is Kind.JUDGED else key.why
            out.append((shape, name, key.kind, why))
    return out


def markdown() -> str:
    """OPERATIONS.md's table of every key (tests/repo/test_policy_table.py compares)."""
    lines = ["| level | key | class | why |", "| --- | --- | --- | --- |"]
    lines += [f"| {s} | `{k}` | {kind} | {why} |" for s, k, kind, why in rows()]
    return "\n".join(lines)
