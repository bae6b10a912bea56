"""core.admission.host through core.admission.policy.judge: what reaches the host beyond a
container (issue 33): volume drivers and driver_opts, the host's network by any road, provider
programs, hooks, build contexts, mount types and propagation, the engine's API socket. Each refused
by default, named with the allowance that opens it, and let through by exactly that allowance."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import host as policy_host
from monky_deployd.core.admission import policy, rules
from monky_deployd.core.admission import rules as terms
from monky_deployd.core.admission.rules import Allow, Rules
from monky_deployd.core.errors import Code

STATE = "/var/lib/monky-deployd"
RELEASE = f"{STATE}/revisions/r1"
PROTECTED = ("/", "/etc", STATE)
ROOTS = Allow(bind_roots=("/srv/app",), build=True)


def config(svc: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return {"name": "pj", "services": {"web": {"image": "x", **(svc or {})}}, **top}


def judged(cfg: dict[str, Any], rules: Rules | None = None) -> list[rules.Violation]:
    rules = rules or Rules(allow=ROOTS, protected=PROTECTED)
    return policy.judge(cfg, rules, release_dir=RELEASE)


def keys_of(found: list[rules.Violation]) -> set[str]:
    return {v.key for v in found}


def with_keys(*paths: str) -> Rules:
    return Rules(allow=ROOTS, protected=PROTECTED, keys=paths)


dirs = st.sampled_from(["/etc", STATE, f"{STATE}/token.json", "/srv/app/x", "/srv/other", "/"])


@given(st.lists(dirs, min_size=1, max_size=3), st.sampled_from(["lowerdir", "upperdir", "workdir"]))
def test_an_overlay_volume_is_refused_and_each_of_its_paths_judged_even_when_allowed(
    paths: list[str], option: str
) -> None:
    opts = {"type": "overlay", "device": "overlay", "o": f"{option}={':'.join(paths)}"}
    cfg = config(volumes={"data": {"name": "pj_data", "driver_opts": opts}})
    found = judged(cfg)
    assert "volumes.data.driver_opts" in keys_of(found)
    opened = judged(cfg, with_keys("volumes.data.driver_opts"))
    assert "volumes.data.driver_opts" not in keys_of(opened)
    for path in paths:  # each path judged by the one host-path judge, allowance or not
        blocked = not path.startswith("/srv/app/")
        hits = [
            v
            for v in opened
            if v.key == f"volumes.data.driver_opts.o.{option}" and v.asks.startswith(f"{path} ")
        ]
        assert bool(hits) == blocked, (path, opened)
        if path.startswith(("/etc", STATE)) or path == "/":
            assert all(v.code is Code.POLICY_PROTECTED_PATH for v in hits)


@given(st.sampled_from(["/srv/app/data", "/srv/other", "/etc/x"]))
def test_a_plain_bind_volume_needs_no_key_only_an_allowed_root(device: str) -> None:
    opts = {"type": "none", "o": "bind", "device": device}
    found = judged(config(volumes={"data": {"name": "pj_data", "driver_opts": opts}}))
    assert "volumes.data.driver_opts" not in keys_of(found)
    assert bool(found) == (not device.startswith("/srv/app/"))


# (kind, its own driver, other drivers, other names): volumes and networks judged alike
KINDS = {
    "volumes": ("local", ["rexray", "nfs-plugin"], ["other_n", "n"]),
    "networks": ("bridge", ["macvlan", "ipvlan"], ["otherapp_default", "bridge"]),
}


@given(st.sampled_from(sorted(KINDS)), st.data())
def test_a_volume_or_network_beyond_the_project_is_refused_unless_policy_keys_names_it(
    kind: str, data: st.DataObject
) -> None:
    own, drivers, names = KINDS[kind]
    spec = data.draw(
        st.fixed_dictionaries(
            {},
            optional={
                "driver": st.sampled_from([own, *drivers]),
                "external": st.booleans(),
                "name": st.sampled_from(["pj_n", *names]),
            },
        )
    )
    found = keys_of(judged(config(**{kind: {"n": spec}})))
    want = set()
    if spec.get("driver", own) != own:
        want.add(f"{kind}.n.driver")
    if spec.get("external"):
        want.add(f"{kind}.n.external")
    elif spec.get("name") not in (None, "pj_n"):
        want.add(f"{kind}.n.name")
    assert found == want
    assert judged(config(**{kind: {"n": spec}}), with_keys(*want)) == []


@given(
    st.sampled_from([{"name": "host"}, {"driver": "host"}, {"name": "host", "external": True}]),
    st.sampled_from([None, "web", "other"]),
)
def test_the_hosts_network_by_any_road_needs_the_network_namespace(
    spec: dict[str, Any], scope: str | None
) -> None:
    cfg = config({"networks": {"n": None}}, networks={"n": spec})
    found = judged(cfg)
    assert [(v.service, v.key, v.allow_with) for v in found] == [
        ("web", "networks.n", "policy.services.web.host_namespaces: [network]")
    ]
    allow = Allow(host_namespaces=frozenset({"network"}), bind_roots=("/srv/app",))
    rules = (
        Rules(allow=allow, protected=PROTECTED)
        if scope is None
        else Rules(allow=ROOTS, services={scope: allow}, protected=PROTECTED)
    )
    assert bool(judged(cfg, rules)) == (scope == "other")


@given(st.sampled_from(["/opt/evil/prog", "model", "docker-model"]), st.booleans())
def test_a_provider_runs_only_the_program_an_allowance_names(program: str, allowed: bool) -> None:
    cfg = config({"provider": {"type": program, "options": {"a": ["1"]}}})
    found = judged(cfg)
    assert [(v.key, v.allow_with) for v in found] == [
        ("provider", f"policy.services.web.providers: [{program}]")
    ]
    other = "something-else" if not allowed else program
    rules = Rules(allow=ROOTS, services={"web": Allow(providers=frozenset({other}))})
    assert bool(judged(cfg, rules)) == (not allowed)


@given(st.sampled_from(["post_start", "pre_stop"]), st.booleans())
def test_a_hook_is_judged_as_its_service(hook: str, privileged: bool) -> None:
    cfg = config({hook: [{"command": ["id"], "privileged": privileged, "user": "root"}]})
    found = judged(cfg)
    assert [(v.key, v.allow_with) for v in found] == (
        [(f"{hook}.privileged", "policy.services.web.privileged: true")] if privileged else []
    )
    assert judged(cfg, Rules(allow=Allow(privileged=True, bind_roots=("/srv/app",)))) == []


@given(st.sampled_from([STATE, "/etc", "/srv/other", f"{RELEASE}/", RELEASE, "/srv/app/ctx"]))
def test_a_build_context_lies_in_the_release_or_under_an_allowed_root(context: str) -> None:
    cfg = config({"build": {"context": context, "dockerfile": "Dockerfile"}})
    found = judged(cfg)
    ok = context.rstrip("/") == RELEASE or context.startswith("/srv/app/")
    assert bool(found) == (not ok)
    assert {v.key for v in found} <= {"build.context", "build.dockerfile"}
    if context in (STATE, "/etc"):
        assert {v.code for v in found} == {Code.POLICY_PROTECTED_PATH}


@given(st.sampled_from(["https://git.example.net/x.git", "git@host:x.git", "github.com/a/b"]))
def test_a_build_from_a_url_is_a_source_outside_the_release(url: str) -> None:
    found = judged(config({"build": {"context": url, "additional_contexts": {"b": url}}}))
    assert {(v.key, v.code) for v in found} == {
        ("build.context", Code.POLICY_SOURCE),
        ("build.additional_contexts.b", Code.POLICY_SOURCE),
    }
    images = {"i": "docker-image://alpine", "s": "service:db", "t": "target:base"}
    assert judged(config({"build": {"context": RELEASE, "additional_contexts": images}})) == []


@given(st.sampled_from(["npipe", "cluster", "bind", "volume", "tmpfs", "image"]))
def test_only_the_mount_types_a_box_gives_are_allowed(kind: str) -> None:
    mount = {"type": kind, "target": "/t", **({"source": "/srv/app/a"} if kind == "bind" else {})}
    found = judged(config({"volumes": [mount]}))
    assert bool(found) == (kind in ("npipe", "cluster"))


@given(st.sampled_from(["shared", "rshared", "slave", "rslave", "private", "rprivate"]))
def test_a_bind_whose_mounts_reach_the_host_is_refused(propagation: str) -> None:
    mount = {
        "type": "bind",
        "source": "/srv/app/a",
        "target": "/t",
        "bind": {"propagation": propagation},
    }
    found = judged(config({"volumes": [mount]}))
    path = "services.web.volumes.bind.propagation"
    assert keys_of(found) == ({path} if propagation in ("shared", "rshared") else set())
    assert judged(config({"volumes": [mount]}), with_keys(path)) == []


def test_the_engines_api_socket_is_never_given() -> None:
    found = judged(config({"use_api_socket": True}), Rules(allow=Allow(privileged=True)))
    assert [(v.key, v.code, v.allow_with) for v in found] == [
        ("use_api_socket", Code.POLICY_PROTECTED_PATH, "")
    ]


def test_every_host_path_of_a_release_is_found() -> None:
    cfg = config(
        {
            "volumes": [{"type": "bind", "source": "/a", "target": "/t"}],
            "secrets": [{"source": "s"}],
            "configs": ["c"],
            "build": {
                "context": "/ctx",
                "dockerfile": "/df/Dockerfile",
                "additional_contexts": {"x": "/more"},
                "secrets": [{"source": "bs"}],
            },
        },
        secrets={"s": {"file": "/sec"}, "bs": {"file": "/bsec"}},
        configs={"c": {"file": "/cfg"}},
        volumes={"v": {"driver_opts": {"device": "/dev/sdz", "o": "upperdir=/up,x=/y"}}},
    )
    assert {(h.key, h.path) for h in policy_host.host_paths(cfg)} == {
        ("volumes", "/a"),
        ("secrets", "/sec"),
        ("configs", "/cfg"),
        ("build.context", "/ctx"),
        ("build.dockerfile", "/df/Dockerfile"),
        ("build.additional_contexts.x", "/more"),
        ("build.secrets", "/bsec"),
        ("volumes.v.driver_opts.device", "/dev/sdz"),
        ("volumes.v.driver_opts.o.upperdir", "/up"),
        ("volumes.v.driver_opts.o.x", "/y"),
    }


SEGMENT = st.sampled_from(["etc", "..", ".", "data", "srv", "app", "shadow"])
RELATIVE_PATHS = st.lists(SEGMENT, min_size=1, max_size=4).map("/".join)


@given(
    RELATIVE_PATHS,
    st.sampled_from(
        [
            ("device", "none", "bind"),
            ("device", "", "bind,ro"),
            ("device", "bind", ""),
            ("device", "none", ""),
            ("lowerdir", "overlay", ""),
            ("upperdir", "overlay", ""),
            ("workdir", "overlay", ""),
            ("size", "tmpfs", ""),
        ]
    ),
    st.booleans(),
)
def test_a_relative_path_in_driver_opts_is_refused_even_when_driver_opts_are_allowed(
    path: str, where: tuple[str, str, str], keyed: bool
) -> None:
    """``device: ../../etc`` of a bind, or overlay's ``lowerdir=etc``: the engine resolves a
    relative path from its own working directory (/ for a daemon: /etc). Refused with its own
    sentence, whatever ``policy.keys`` allows; a path-less value (tmpfs' ``size``) is no path."""
    option, kind, o = where
    opts: dict[str, str] = {"type": kind} if kind else {}
    if option == "device":
        opts["device"] = path
        if o:
            opts["o"] = o
    else:
        opts["device"] = "overlay" if kind == "overlay" else kind
        opts["o"] = f"{option}={path}" + (",upperdir=/srv/app/u" if option == "lowerdir" else "")
    cfg = config(volumes={"data": {"name": "pj_data", "driver_opts": opts}})
    rules = with_keys("volumes.data.driver_opts") if keyed else with_keys()
    found = judged(cfg, rules)
    key = "volumes.data.driver_opts." + ("device" if option == "device" else f"o.{option}")
    hits = [v for v in found if v.key == key]
    if option == "size":  # "size=etc/.." holds a "/" only sometimes: a path when it does
        assert bool(hits) == ("/" in path)
    else:
        assert [v.asks for v in hits] == [f"{path} {terms.RELATIVE}"]
        assert hits[0].allow_with == "" and hits[0].code is Code.POLICY_REFUSED
    if keyed or (option == "device" and kind in ("none", "bind", "") and o):
        # driver_opts themselves allowed (or a plain bind): only the relative path refuses
        assert {v.key for v in found} == {v.key for v in hits}


def test_a_devices_source_of_another_filesystem_type_is_not_a_path() -> None:
    for opts in (
        {"type": "nfs", "o": "addr=10.0.0.1,rw", "device": ":/export/data"},
        {"type": "tmpfs", "device": "tmpfs", "o": "size=64m"},
        {"type": "overlay", "device": "overlay", "o": "lowerdir=/srv/app/l"},
    ):
        found = judged(
            config(volumes={"d": {"name": "pj_d", "driver_opts": opts}}),
            with_keys("volumes.d.driver_opts"),
        )
        assert found == [], (opts, found)
