"""core.admission.policy: the local policy's judge over compose's effective configuration (the JSON
shape ``docker compose config --format json`` prints; tests/integration/box/test_policy_compose.py
feeds it the real thing). One property per policy field: refused by default, allowed by its
allowance (for every service or for that one only), and the config line the refusal names is
the one that allows it."""

from __future__ import annotations

import json
import posixpath
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import policy, rules
from monky_deployd.core.admission import rules as terms
from monky_deployd.core.admission.rules import Allow, Rules
from monky_deployd.core.errors import Code

SERVICES = st.sampled_from(["web", "db", "vpn-1", "job_x"])
PROTECTED = ("/", "/etc", "/proc", "/sys", "/dev", "/run/docker.sock", "/var/lib/monky-deployd")


def judged(svc: dict[str, Any], rules: Rules, name: str = "web") -> list[rules.Violation]:
    return policy.judge({"services": {name: {"image": "x", **svc}}}, rules)


def fix_lines(found: list[rules.Violation]) -> set[str]:
    return {v.allow_with for v in found}


def allow_one(key: str, value: Any, service: str | None) -> Rules:
    """Rules with one allowance, for every service (None) or for ``service`` only."""
    scope = Allow(**{key: value})
    return Rules(allow=scope) if service is None else Rules(services={service: scope})


SCOPES = st.sampled_from([None, "web", "other"])
BUILDS = Allow(build=True)


@given(st.booleans(), SCOPES)
def test_privileged_is_refused_unless_allowed_for_that_service(on: bool, scope: str | None) -> None:
    found = judged({"privileged": on}, allow_one("privileged", True, scope))
    refused = on and scope == "other"
    assert [v.key for v in found] == (["privileged"] if refused else [])
    base = judged({"privileged": on}, Rules())
    assert fix_lines(base) == ({"policy.services.web.privileged: true"} if on else set())


@given(
    st.dictionaries(
        st.sampled_from(sorted(terms.HOST_NAMESPACE_KEYS)),
        st.sampled_from(["host", "HOST", "private", "service:db", "shareable", "none"]),
    ),
    st.sets(st.sampled_from(terms.HOST_NAMESPACES)),
    SCOPES,
)
def test_a_host_namespace_is_refused_unless_that_namespace_is_allowed(
    keys: dict[str, str], allowed: set[str], scope: str | None
) -> None:
    rules = allow_one("host_namespaces", frozenset(allowed), scope)
    found = judged(dict(keys), rules)
    effective = allowed if scope != "other" else set()
    want = {
        k
        for k, v in keys.items()
        if v.lower() == "host" and terms.HOST_NAMESPACE_KEYS[k] not in effective
    }
    # network_mode names a network the engine joins (core.admission.names): none of these is the
    # release's own (service:<x> is left to compose, which refuses an x of no service)
    named = keys.get("network_mode", "none").lower() not in ("host", "none", "service:db")
    assert {v.key for v in found} == want | ({"network_mode"} if named else set())
    for v in found:
        if v.key == "network_mode" and named:
            continue
        ns = terms.HOST_NAMESPACE_KEYS[v.key]
        assert v.allow_with == f"policy.services.web.host_namespaces: [{ns}]"
        # the line it names, followed, lets it through
        assert not judged({v.key: "host"}, allow_one("host_namespaces", frozenset({ns}), "web"))


CAPS = st.sampled_from(
    [*sorted(terms.BASELINE_CAPS), "NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE", "BPF", "ALL"]
)


@given(
    st.lists(st.tuples(CAPS, st.sampled_from(["", "CAP_", "cap_"]), st.booleans()), max_size=6),
    st.sets(CAPS, max_size=3),
    SCOPES,
)
def test_cap_add_beyond_baseline_is_refused_one_capability_at_a_time(
    caps: list[tuple[str, str, bool]], allowed: set[str], scope: str | None
) -> None:
    written = [pre + (c.lower() if low else c) for c, pre, low in caps]
    found = judged({"cap_add": written}, allow_one("cap_add", frozenset(allowed), scope))
    effective = allowed if scope != "other" else set()
    want = {c for c, _, _ in caps} - terms.BASELINE_CAPS - effective
    assert {v.asks for v in found} == want
    assert all(v.allow_with == f"policy.services.web.cap_add: [{v.asks}]" for v in found)
    assert all(v.code is Code.POLICY_REFUSED for v in found)


DEVICES = st.sampled_from(["/dev/fuse", "/dev/net/tun", "/dev/kvm", "/dev/sda", "/dev//fuse/"])


@given(st.lists(DEVICES, max_size=4), st.sets(DEVICES, max_size=2), st.booleans())
def test_a_device_is_refused_unless_its_host_path_is_allowed(
    devices: list[str], allowed: set[str], long_form: bool
) -> None:
    entries: list[Any] = (
        [{"source": d, "target": "/dev/x", "permissions": "rwm"} for d in devices]
        if long_form
        else [f"{d}:/dev/x" for d in devices]
    )
    rules = Rules(allow=Allow(devices=frozenset(terms.normpath(d) for d in allowed)))
    found = judged({"devices": entries}, rules)
    want = {terms.normpath(d) for d in devices} - {terms.normpath(d) for d in allowed}
    assert {terms.normpath(v.asks) for v in found} == want


OPTS = st.sampled_from(
    [
        "apparmor:unconfined", "apparmor=unconfined", "seccomp:unconfined", "seccomp=unconfined",
        "label:disable", "label=disable", "systempaths=unconfined", "seccomp=/etc/x.json",
        "label=user:root", "no-new-privileges", "no-new-privileges:true", "apparmor=docker-x",
        "label=level:s0:c100", "label=type:container_t",
    ]
)  # fmt: skip
SAFE_OPTS = {
    "no-new-privileges", "no-new-privileges=true", "apparmor=docker-x", "label=level:s0:c100",
    "label=type:container_t",
}  # fmt: skip


@given(st.lists(OPTS, max_size=5), st.sets(OPTS, max_size=2))
def test_security_opt_that_turns_confinement_off_is_refused_in_either_spelling(
    opts: list[str], allowed: set[str]
) -> None:
    rules = Rules(allow=Allow(security_opt=frozenset(terms.security_opt(o) for o in allowed)))
    found = judged({"security_opt": opts}, rules)
    normal = {terms.security_opt(o) for o in opts}
    want = normal - SAFE_OPTS - {terms.security_opt(o) for o in allowed}
    assert {terms.security_opt(v.asks) for v in found} == want
    assert all(v.allow_with.endswith(f"[{terms.security_opt(v.asks)}]") for v in found)


SYSCTLS = st.sampled_from(
    [*sorted(terms.SAFE_SYSCTLS)[:4], "net.core.somaxconn", "kernel.msgmax", "net.ipv4.ip_forward"]
)


@given(
    st.dictionaries(SYSCTLS, st.integers(0, 9).map(str), max_size=5),
    st.booleans(),
    st.sets(SYSCTLS),
)
def test_sysctls_beyond_baselines_safe_set_are_refused_as_map_or_list(
    values: dict[str, str], as_list: bool, allowed: set[str]
) -> None:
    written: Any = [f"{k}={v}" for k, v in values.items()] if as_list else values
    found = judged({"sysctls": written}, Rules(allow=Allow(sysctls=frozenset(allowed))))
    assert {v.asks for v in found} == set(values) - terms.SAFE_SYSCTLS - allowed


@given(st.sampled_from(["", "custom", "system.slice"]), st.sets(st.sampled_from(["custom", "x"])))
def test_cgroup_parent_is_refused_unless_that_parent_is_allowed(
    parent: str, allowed: set[str]
) -> None:
    svc = {"cgroup_parent": parent} if parent else {}
    found = judged(svc, Rules(allow=Allow(cgroup_parent=frozenset(allowed))))
    assert bool(found) == bool(parent and parent not in allowed)


# -- bind mounts ------------------------------------------------------------------------------

SEGMENTS = st.sampled_from(
    ["srv", "app", "etc", "..", ".", "", "var", "lib", "monky-deployd", "run", "docker.sock"]
)
PATHS = st.builds(
    lambda parts, lead, trail: ("/" if lead else "") + "/".join(parts) + ("/" if trail else ""),
    st.lists(SEGMENTS, min_size=1, max_size=5),
    st.booleans() | st.just(True),
    st.booleans(),
)  # absolute (mostly) or relative, with .., ., // and a trailing slash
ROOTS = st.sampled_from(["/srv", "/srv/app", "/var/lib", "/etc", "/data"])


def reference(path: str, resolved: str, roots: set[str]) -> Code | None:
    """The test's own rule: protected if it or what it resolves to is inside or above a
    protected path; else refused unless both forms lie inside an allowed root."""
    forms = {posixpath.normpath(path), posixpath.normpath(resolved)}
    forms = {"/" if f == "//" else f for f in forms}
    if any(not f.startswith("/") for f in forms):
        return Code.POLICY_REFUSED

    def under(a: str, b: str) -> bool:
        return a == b or a.startswith(b.rstrip("/") + "/")

    for f in forms:
        for p in PROTECTED:
            if (p != "/" and under(f, p)) or under(p, f):
                return Code.POLICY_PROTECTED_PATH
    if all(any(under(f, r) for r in roots) for f in forms):
        return None
    return Code.POLICY_REFUSED


@given(
    PATHS,
    st.one_of(st.none(), PATHS),
    st.sets(ROOTS, max_size=3),
    st.sampled_from(["short", "long", "secret", "volume"]),
)
def test_a_bind_mount_is_judged_by_its_normalized_and_resolved_path(
    path: str, link: str | None, roots: set[str], syntax: str
) -> None:
    """``..``, ``.``, doubled and trailing slashes, a symlink that leads elsewhere, in a
    service's volumes, a secret's file or a local volume's device: refused outside the allowed
    roots, and a protected path (or one above it) whatever the roots say."""
    config: dict[str, Any] = {"services": {"web": {"image": "x"}}}
    if syntax in ("short", "long"):
        config["services"]["web"]["volumes"] = [{"type": "bind", "source": path, "target": "/m"}]
    elif syntax == "secret":
        config["services"]["web"]["secrets"] = [{"source": "s", "target": "/run/secrets/s"}]
        config["secrets"] = {"s": {"name": "p_s", "file": path}}
    else:
        config["volumes"] = {
            "v": {"driver": "local", "driver_opts": {"type": "none", "o": "bind", "device": path}}
        }
    resolved = link if link is not None else path
    rules = Rules(allow=Allow(bind_roots=tuple(sorted(roots))), protected=PROTECTED)
    found = policy.judge(config, rules, {path: resolved})
    want = reference(path, resolved, roots)
    assert [v.code for v in found] == ([] if want is None else [want])
    if want is Code.POLICY_PROTECTED_PATH:
        assert found[0].allow_with == ""
        # no root rescues it, not even its own
        wide = Rules(allow=Allow(bind_roots=("/etc", "/srv", "/var", "/run")), protected=PROTECTED)
        assert [v.code for v in policy.judge(config, wide, {path: resolved})] == [want]


@given(
    st.sampled_from(["/srv/app/data", "/srv/app/data/", "/srv//app/./data", "/srv/x/../app/data"])
)
def test_a_root_for_one_service_does_not_open_it_to_another(path: str) -> None:
    rules = Rules(services={"web": Allow(bind_roots=("/srv/app",))}, protected=PROTECTED)
    vol = [{"type": "bind", "source": path, "target": "/d"}]
    config = {"services": {"web": {"volumes": vol}, "db": {"volumes": vol}}}
    found = policy.judge(config, rules)
    assert [(v.service, v.allow_with) for v in found] == [
        ("db", "policy.services.db.bind_roots: [/srv/app]")
    ]


def test_the_env_file_may_be_the_releases_env_only() -> None:
    svc = {
        "env_file": [
            {"path": "/rel/r1/.env"},
            {"path": "/rel/r1/../r0/.env"},
            {"path": "/etc/shadow"},
        ]
    }
    found = policy.judge({"services": {"web": svc}}, Rules(), release_dir="/rel/r1")
    assert [v.asks.split()[0] for v in found] == ["/etc/shadow", "/rel/r1/../r0/.env"]
    assert {v.code for v in found} == {Code.POLICY_SOURCE}


@given(
    st.sampled_from(
        [
            {"include": ["other.yaml"]},
            {"include": [{"path": "oci://registry/x"}]},
            {"services": {"web": {"extends": {"file": "/etc/compose.yaml", "service": "x"}}}},
            {"services": {"web": {"extends": {"file": "git@github.com:x/y.git", "service": "x"}}}},
            {"services": {"web": {"label_file": "/etc/labels"}}},
        ]
    )
)
def test_what_compose_would_fetch_from_outside_the_release_is_refused_before_it_runs(
    doc: dict[str, Any],
) -> None:
    found = policy.sources(doc)
    assert len(found) == 1 and found[0].code is Code.POLICY_SOURCE


def test_extends_of_a_service_in_the_same_file_is_not_a_source() -> None:
    assert policy.sources({"services": {"web": {"extends": {"service": "base"}}, "base": {}}}) == []
    assert policy.sources({"services": {"web": {"extends": "base"}, "base": {}}}) == []


def test_the_refusals_first_line_names_the_gravest_fault_and_each_has_its_line() -> None:
    config = {
        "services": {
            "web": {
                "cap_add": ["NET_ADMIN"],
                "volumes": [{"type": "bind", "source": "/var/run/docker.sock", "target": "/s"}],
            }
        }
    }
    found = policy.judge(config, Rules(protected=("/run/docker.sock", "/var/run/docker.sock")))
    err = policy.refusal("r2", found)
    assert err.code is Code.POLICY_PROTECTED_PATH and err.outcome == "refused"
    assert "/var/run/docker.sock reaches" in err.message.split(";")[0]
    assert err.detail.splitlines() == [
        "service web: volumes /var/run/docker.sock reaches /var/run/docker.sock (no allowance "
        "permits it)",
        "service web: cap_add NET_ADMIN (allow with policy.services.web.cap_add: [NET_ADMIN])",
    ]


def test_volumes_from_another_container_is_refused_from_a_service_of_the_project_is_not() -> None:
    svc = {"volumes_from": ["container:foo", "db:ro", "container:bar:ro"]}
    found = judged(svc, Rules(allow=Allow(privileged=True, bind_roots=("/srv",))))
    assert [(v.key, v.asks, v.allow_with) for v in found] == [
        ("volumes_from", "container:bar", ""),
        ("volumes_from", "container:foo", ""),
    ]


@given(
    st.dictionaries(
        st.sampled_from(["network_mode", "pid", "ipc"]),
        st.sampled_from(["container:other", "container:0123abcd", "service:db", "host"]),
    ),
)
def test_another_containers_namespace_is_refused_whatever_the_allowances(
    keys: dict[str, str],
) -> None:
    """``network_mode``/``pid``/``ipc`` ``container:<x>``: a namespace of a container of any
    project on the box (another app's loopback services, its processes); ``service:`` is one of
    the release's own."""
    everything = Allow(privileged=True, host_namespaces=frozenset(terms.HOST_NAMESPACES))
    found = judged(dict(keys), Rules(allow=everything))
    want = {
        (k, f"{v} (another container's namespace)", "")
        for k, v in keys.items()
        if v.startswith("container:")
    }
    assert {(v.key, v.asks, v.allow_with) for v in found} == want


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "privileged": st.booleans(),
            "network": st.sampled_from(["host", "HOST", "default", "none"]),
            "entitlements": st.lists(st.sampled_from(["network.host", "security.insecure"])),
            "ssh": st.lists(st.sampled_from(["default", "key=/root/.ssh/id_ed25519"])),
        },
    ),
    SCOPES,
)
def test_a_build_that_reaches_the_host_is_refused_unless_allowed(
    build: dict[str, Any], scope: str | None
) -> None:
    svc = {"build": {"context": "/r/r1", **build}}
    found = {(v.key, v.asks, v.allow_with) for v in judged(svc, Rules(allow=BUILDS))}
    want = set()
    if build.get("privileged") is True:
        want.add(("build.privileged", "true", "policy.services.web.privileged: true"))
    if build.get("network", "").lower() == "host":
        want.add(("build.network", "host", "policy.services.web.host_namespaces: [network]"))
    if build.get("network") == "default":  # the engine's default bridge (core.admission.names)
        bridge = (
            "default (the engine's default bridge, shared with every container `docker run` starts)"
        )
        want.add(("build.network", bridge, "policy.services.web.networks: [default]"))
    want |= {("build.entitlements", e, "") for e in build.get("entitlements", [])}
    want |= {("build.ssh", s, "") for s in build.get("ssh", [])}
    assert found == want
    # the lines named, followed, let privileged and the host network through; nothing else
    allow = Allow(
        privileged=True,
        host_namespaces=frozenset({"network"}),
        networks=frozenset({"default"}),
        build=True,
    )
    rules = Rules(allow=allow) if scope is None else Rules(allow=BUILDS, services={scope: allow})
    left = {(v.key, v.asks) for v in judged(svc, rules)}
    opened = {"build.privileged", "build.network"} if scope != "other" else set()
    assert left == {(k, a) for k, a, _ in want if k not in opened}


requests = st.fixed_dictionaries(
    {},
    optional={
        "driver": st.sampled_from(["nvidia", "amd"]),
        "count": st.integers(-1, 4),
        "capabilities": st.lists(st.sampled_from(["gpu", "compute", "utility"]), min_size=1),
        "device_ids": st.lists(st.sampled_from(["0", "1"]), min_size=1),
    },
)


@given(st.lists(requests, max_size=2), st.lists(requests, max_size=2), SCOPES)
def test_a_device_request_is_refused_unless_gpu_devices_are_allowed(
    gpus: list[dict[str, Any]], reserved: list[dict[str, Any]], scope: str | None
) -> None:
    """``gpus`` and ``deploy.resources.reservations.devices``: the engine hands the container
    host devices (a GPU and its driver's files); ``devices: [gpu]`` allows them."""
    svc: dict[str, Any] = {
        "gpus": gpus,
        "deploy": {"resources": {"reservations": {"devices": reserved}}},
    }
    found = judged(svc, Rules())
    assert sorted(v.key for v in found) == sorted(
        ["gpus"] * len({json.dumps(r, sort_keys=True) for r in gpus})
        + ["deploy.resources.reservations.devices"]
        * len({json.dumps(r, sort_keys=True) for r in reserved})
    )
    assert fix_lines(found) <= {"policy.services.web.devices: [gpu]"}
    for v in found:
        for k, value in (w.split("=", 1) for w in v.asks.split() if "=" in w):
            assert k in {"driver", "count", "capabilities", "device_ids"} and value
    left = judged(svc, allow_one("devices", frozenset({terms.GPU}), scope))
    assert len(left) == (len(found) if scope == "other" else 0)


# --- issue 40: what acts beyond the container's own namespaces and cgroup ---

LOG_DRIVERS = st.sampled_from(
    [*sorted(terms.LOCAL_LOG_DRIVERS), "syslog", "gelf", "fluentd", "splunk", "awslogs", "x/y"]
)
LOG_OPTS = st.sampled_from(
    [
        *sorted(terms.LOG_OPTIONS),
        *("syslog-address", "gelf-address", "fluentd-address", "splunk-url", "path"),
        *("syslog-tls-ca-cert", "labels/x", "Max-Size"),
    ]
)


@given(
    st.one_of(st.none(), LOG_DRIVERS),
    st.dictionaries(LOG_OPTS, st.sampled_from(["1m", "unix:///run/x.sock", "127.0.0.1"])),
    st.sets(LOG_DRIVERS, max_size=2),
    SCOPES,
)
def test_only_the_local_log_drivers_with_their_own_options_pass_by_default(
    driver: str | None, options: dict[str, str], allowed: set[str], scope: str | None
) -> None:
    """A log driver runs in the engine (the host's network namespace): by default only
    json-file, local, journald, none (or none named) with LOG_OPTIONS; ``log_drivers``
    permits a driver with its options, for every service or that one."""
    logging: dict[str, Any] = {"options": options}
    if driver is not None:
        logging["driver"] = driver
    found = judged({"logging": logging}, Rules())
    local = driver is None or driver in terms.LOCAL_LOG_DRIVERS
    extra = sorted(o for o in options if o not in terms.LOG_OPTIONS)
    if not local:
        assert [(v.key, v.allow_with) for v in found] == [
            ("logging.driver", f"policy.services.web.log_drivers: [{driver}]")
        ]
        assert "host's network namespace" in found[0].asks
    else:
        assert [v.key for v in found] == [f"logging.options.{o}" for o in extra]
        for v in found:
            assert v.allow_with == (
                f"policy.services.web.log_drivers: [{driver}]" if driver else ""
            )
    # the allowance: that driver, with every option
    opened = judged({"logging": logging}, allow_one("log_drivers", frozenset(allowed), scope))
    permitted = driver is not None and driver in allowed and scope != "other"
    assert opened == ([] if permitted else found)


def test_the_benign_local_logging_of_estates_passes() -> None:
    for logging in (
        {"driver": "json-file", "options": {"max-size": "10m", "max-file": "3"}},
        {"driver": "local", "options": {"max-size": "1m", "compress": "true"}},
        {"driver": "journald", "options": {"tag": "{{.Name}}", "labels": "app"}},
        {"driver": "none"},
        {"options": {"max-size": "5m"}},
    ):
        assert judged({"logging": logging}, Rules()) == [], logging


@given(
    st.one_of(st.integers(-1000, 1000), st.just("-17")),
    st.integers(-1000, 0),
    st.integers(-1000, 0),
)
def test_a_negative_oom_score_adj_needs_the_allowance_of_its_floor(
    score: int | str, every: int, own: int
) -> None:
    found = judged({"oom_score_adj": score}, Rules())
    value = int(score)
    assert [v.key for v in found] == (["oom_score_adj"] if value < 0 else [])
    if found:
        assert found[0].allow_with == f"policy.services.web.oom_score_adj: {value}"
        assert "OOM killer spares" in found[0].asks
        # the line it names, followed, lets it through
        assert not judged({"oom_score_adj": score}, allow_one("oom_score_adj", value, "web"))
    rules = Rules(allow=Allow(oom_score_adj=every), services={"web": Allow(oom_score_adj=own)})
    floor = min(every, own)  # the lower floor of the two scopes
    assert bool(judged({"oom_score_adj": score}, rules)) == (value < floor)
    other = Rules(services={"db": Allow(oom_score_adj=-1000)})
    assert bool(judged({"oom_score_adj": score}, other)) == (value < 0)


ULIMIT_VALUES = st.one_of(
    st.integers(0, 99),
    st.fixed_dictionaries({"soft": st.integers(0, 99), "hard": st.integers(0, 99)}),
)


@given(
    st.dictionaries(
        st.sampled_from(["rtprio", "nofile", "memlock", "nice", "nproc", "core", "rttime"]),
        ULIMIT_VALUES,
        max_size=4,
    ),
    st.booleans(),
    st.booleans(),
)
def test_only_a_real_time_priority_limit_is_refused_in_ulimits(
    limits: dict[str, Any], in_build: bool, keyed: bool
) -> None:
    """RLIMIT_RTPRIO lets an unprivileged process take a real-time class, which preempts every
    host process whatever the container's CPU limits; every other rlimit is the container's."""
    key = "build.ulimits" if in_build else "ulimits"
    svc: dict[str, Any] = (
        {"build": {"context": "/srv", "ulimits": limits}} if in_build else {"ulimits": limits}
    )
    path = f"services.web.{key}.rtprio"
    spec = limits.get("rtprio")
    wants = spec is not None and (
        spec != 0 if isinstance(spec, int) else spec["soft"] != 0 or spec["hard"] != 0
    )
    rules = Rules(allow=Allow(bind_roots=("/srv",)), keys=(path,) if keyed else ())
    found = [v for v in judged(svc, rules) if "ulimits" in v.key]
    assert [(v.key, v.allow_with) for v in found] == (
        [(path, f"policy.keys: [{path}]")] if wants and not keyed else []
    )


@given(
    st.sampled_from(["weight_device", "device_read_bps", "device_write_bps", "device_read_iops"]),
    st.sampled_from(["/dev/sda", "/dev/nvme0n1", "dev/sda", "../dev/sda"]),
    st.booleans(),
)
def test_a_block_devices_io_limit_needs_that_device_allowed(
    key: str, path: str, allowed: bool
) -> None:
    blkio = {"weight": 10, key: [{"path": path, "rate": 1048576}]}
    rules = allow_one("devices", frozenset({path}) if allowed else frozenset(), "web")
    found = judged({"blkio_config": blkio}, rules)
    if not path.startswith("/"):
        assert [(v.key, v.allow_with) for v in found] == [(f"blkio_config.{key}", "")]
        assert terms.RELATIVE in found[0].asks
    elif allowed:
        assert found == []
    else:
        assert [(v.key, v.allow_with) for v in found] == [
            (f"blkio_config.{key}", f"policy.services.web.devices: [{path}]")
        ]
    assert judged({"blkio_config": {"weight": 300}}, Rules(blkio_default=500)) == []


@given(
    st.sampled_from(["secret", "config", "bind", "context", "additional"]),
    st.sampled_from(["etc", "../../etc", "./data", "srv/app", "..", "data/../../etc"]),
)
def test_a_relative_path_is_refused_in_every_path_valued_option(where: str, path: str) -> None:
    """compose makes its paths absolute; a model that still names a relative one is resolved by
    the engine (or compose) from its own working directory: refused with its own sentence."""
    cfg: dict[str, Any] = {"services": {"web": {"image": "x"}}}
    web = cfg["services"]["web"]
    if where in ("secret", "config"):
        web[f"{where}s"] = [{"source": "s"}]
        cfg[f"{where}s"] = {"s": {"file": path}}
    elif where == "bind":
        web["volumes"] = [{"type": "bind", "source": path, "target": "/m"}]
    elif where == "context":
        web["build"] = {"context": path, "dockerfile_inline": "FROM scratch"}
    else:
        web["build"] = {"context": "/srv/app", "additional_contexts": {"more": path}}
    rules = Rules(allow=Allow(bind_roots=("/srv", "/")), protected=PROTECTED)
    found = [v for v in policy.judge(cfg, rules, release_dir="/srv/app") if path in v.asks]
    assert len(found) == 1, found
    assert found[0].asks == f"{path} {terms.RELATIVE}"
    assert found[0].allow_with == "" and found[0].code is Code.POLICY_REFUSED
