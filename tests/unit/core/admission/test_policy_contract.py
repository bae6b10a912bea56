"""The bundle contract's refusals and the wrong refusals fixed (issue 42), on
``core.admission.policy``'s judge and ``core.admission.bundle``'s validation: each contract
refusal says how to write the bundle instead; an image reference in ``build.cache_from`` or
``cache_to`` reads no host path while a ``type=local`` entry or a path is a host path; one
protected file, read-only, passes only by an allowance naming exactly that path; ``~`` is
refused up front with its own sentence; a service with ``build`` and no ``image`` has its own
code."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import host as policy_host
from monky_deployd.core.admission import policy
from monky_deployd.core.admission import rules as admission_rules
from monky_deployd.core.admission.bundle import validate
from monky_deployd.core.admission.rules import Allow, Rules
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

PROTECTED = ("/", "/etc", "/etc/monky-deployd", "/run/docker.sock", "/var/lib/docker")
LOCALTIME = "/etc/localtime"


def judged(svc: dict[str, Any], rules: Rules, top: dict[str, Any] | None = None) -> list[Any]:
    return policy.judge({"services": {"web": {"image": "x", **svc}}, **(top or {})}, rules)


def bind(source: str, read_only: bool) -> dict[str, Any]:
    return {"type": "bind", "source": source, "target": "/t", "read_only": read_only}


# -- build.cache_from / cache_to ---------------------------------------------------------------

IMAGE_REFS = st.sampled_from(
    [
        "registry.example.net/team/app:cache",
        "team/app:buildcache",
        "busybox",
        "localhost:5000/app@sha256:" + "a" * 64,
        "type=registry,ref=registry.example.net/app:cache",
        "type=inline",
    ]
)


@given(ref=IMAGE_REFS, key=st.sampled_from(["cache_from", "cache_to"]))
def test_an_image_reference_in_a_build_cache_is_allowed(ref: str, key: str) -> None:
    svc = {"build": {"context": "/srv/app", key: [ref]}}
    assert judged(svc, Rules(allow=Allow(bind_roots=("/srv",), build=True))) == []


@pytest.mark.parametrize(
    ("key", "entry", "path"),
    [
        ("cache_from", "type=local,src=/var/cache/app", "/var/cache/app"),
        ("cache_to", "type=local,dest=/var/cache/app,mode=max", "/var/cache/app"),
        ("cache_from", "/var/cache/app", "/var/cache/app"),
        ("cache_to", "type=local,dest=c", "c"),
    ],
)
def test_a_local_cache_is_refused_whatever_the_roots(key: str, entry: str, path: str) -> None:
    """A local cache is read or written where it is when the image is built, never a copy
    (issue 45): refused with the build's code and how to write it, under any root."""
    svc = {"build": {"context": "/srv/app", key: [entry]}}
    for roots in (("/srv",), ("/srv", "/var/cache"), ("/",)):
        found = judged(svc, Rules(allow=Allow(bind_roots=roots, build=True)))
        assert [(v.key, v.code, v.allow_with) for v in found] == [
            (f"build.{key}", Code.POLICY_BUILD, "")
        ]
        assert found[0].asks.startswith(f"{path} (") and "registry" in found[0].rewrite


def test_another_cache_backend_is_refused() -> None:
    gha = {"build": {"context": "/x", "cache_from": ["type=gha,scope=main"]}}
    found = judged(gha, Rules(allow=Allow(bind_roots=("/x",), build=True)))
    assert [(v.key, v.allow_with) for v in found] == [
        ("services.web.build.cache_from", "policy.keys: [services.web.build.cache_from]")
    ]
    keyed = Rules(
        allow=Allow(bind_roots=("/x",), build=True), keys=("services.web.build.cache_from",)
    )
    assert judged(gha, keyed) == []


def test_cache_path_reads_each_entry_as_buildkit_does() -> None:
    assert policy_host.cache_path("app:cache") is None
    assert policy_host.cache_path("type=local,src=/c") == "/c"
    assert policy_host.cache_path("type=local") == ""  # no directory: refused, not allowed
    assert policy_host.cache_path("./c") == "./c"


# -- one protected file, read-only -------------------------------------------------------------


def test_a_read_only_bind_of_localtime_passes_only_by_its_exact_allowance() -> None:
    refused = judged({"volumes": [bind(LOCALTIME, True)]}, Rules(protected=PROTECTED))
    assert [(v.code, v.allow_with) for v in refused] == [
        (Code.POLICY_PROTECTED_PATH, "policy.services.web.read_only_files: [/etc/localtime]")
    ]
    allowed = Rules(protected=PROTECTED, allow=Allow(read_only_files=frozenset({LOCALTIME})))
    assert judged({"volumes": [bind(LOCALTIME, True)]}, allowed) == []
    # never read-write, never another file, never the directory above
    for vol, line in (
        (bind(LOCALTIME, False), ""),
        (bind("/etc", True), ""),
        (bind("/etc/", True), ""),
        (bind("/etc/timezone", True), "policy.services.web.read_only_files: [/etc/timezone]"),
    ):
        found = judged({"volumes": [vol]}, allowed)
        assert [(v.code, v.allow_with) for v in found] == [(Code.POLICY_PROTECTED_PATH, line)]
    for_db = Rules(
        protected=PROTECTED, services={"db": Allow(read_only_files=frozenset({LOCALTIME}))}
    )
    assert judged({"volumes": [bind(LOCALTIME, True)]}, for_db) != []  # db's, not web's


@pytest.mark.parametrize(
    "path", ["/etc/monky-deployd/config.yaml", "/run/docker.sock", "/var/lib/docker/x.json"]
)
def test_the_agents_and_the_engines_files_are_never_allowed(path: str) -> None:
    rules = Rules(protected=PROTECTED, allow=Allow(read_only_files=frozenset({path})))
    found = judged({"volumes": [bind(path, True)]}, rules)
    assert [(v.code, v.allow_with) for v in found] == [(Code.POLICY_PROTECTED_PATH, "")]


# -- the bundle contract's rewrites ------------------------------------------------------------


def test_each_contract_refusal_says_how_to_write_it_instead() -> None:
    config = {
        "name": "shop",
        "services": {
            "web": {
                "image": "x",
                "env_file": ["/r/web.env"],
                "secrets": ["db"],
                "configs": ["conf"],
            },
            "worker": {"build": {"context": "/r"}},
        },
        "secrets": {"db": {"file": "/r/db.txt"}},
        "configs": {"conf": {"file": "/r/app.conf"}},
        "volumes": {"shared": {"external": True}, "fixed": {"name": "data"}},
    }
    found = {(v.service, v.key): v for v in policy.judge(config, Rules(), {}, "/r")}
    assert found[("web", "env_file")].rewrite == admission_rules.REWRITE_ENV_FILE
    assert found[("web", "secrets")].rewrite == admission_rules.REWRITE_FROM_ENV
    assert found[("web", "configs")].rewrite == admission_rules.REWRITE_CONFIG
    assert found[("", "volumes.shared.external")].rewrite == admission_rules.REWRITE_NAMES
    assert found[("", "volumes.fixed.name")].rewrite == admission_rules.REWRITE_NAMES
    build = found[("worker", "build")]
    assert (build.code, build.rewrite) == (Code.BUNDLE_BUILD_ONLY, admission_rules.REWRITE_BUILD)
    for v in found.values():
        if v.rewrite:
            assert v.line().endswith(f"; write instead: {v.rewrite})"), v.line()
    source = policy.sources({"services": {"web": {"extends": {"file": "c.yml", "service": "a"}}}})
    assert [(v.code, v.rewrite) for v in source] == [
        (Code.POLICY_SOURCE, admission_rules.REWRITE_FLATTEN)
    ]


def test_a_service_with_build_and_an_image_is_not_build_only() -> None:
    svc = {"build": {"context": "/r"}, "image": "registry.example.net/app:1"}
    assert judged(svc, Rules(), None) == [] or all(
        v.code is not Code.BUNDLE_BUILD_ONLY for v in judged(svc, Rules())
    )


def test_build_only_is_graver_than_an_allowance_and_names_its_code() -> None:
    found = policy.judge(
        {"services": {"w": {"build": {"context": "/r"}, "cap_add": ["NET_ADMIN"]}}}, Rules()
    )
    err = policy.refusal("r9", found)
    assert err.code is Code.BUNDLE_BUILD_ONLY
    assert isinstance(err, admission_rules.Refusal) and len(err.violations) == 2
    # no POLICY_BUILD beside it: no allowance lets a box build a service with no image
    assert [v.code for v in err.violations][1:] == [Code.POLICY_REFUSED]


# -- ~ up front --------------------------------------------------------------------------------


def raw_bundle(compose: dict[str, Any]) -> dict[str, Any]:
    return {"project": "shop", "compose": yaml.safe_dump(compose), "manifest": []}


@pytest.mark.parametrize(
    ("compose", "where"),
    [
        (
            {"services": {"web": {"image": "x", "volumes": ["~/data:/d"]}}},
            "services.web.volumes[0]",
        ),
        (
            {
                "services": {
                    "web": {
                        "image": "x",
                        "volumes": [{"type": "bind", "source": "~/d", "target": "/d"}],
                    }
                }
            },
            "services.web.volumes[0]",
        ),
        (
            {"services": {"web": {"image": "x"}}, "secrets": {"s": {"file": "~/s.txt"}}},
            "secrets.s.file",
        ),
    ],
)
def test_a_home_path_is_refused_up_front_with_its_own_sentence(
    compose: dict[str, Any], where: str
) -> None:
    with pytest.raises(DeployError) as info:
        validate("r1", raw_bundle(compose))
    err = info.value
    assert err.code is Code.BUNDLE_RELATIVE_BIND
    assert "starts with ~" in err.message and "(~ is no home directory here)" in err.message
    (line,) = err.detail.splitlines()
    assert line.startswith(where) or f": {where} " in line, line
    assert admission_rules.HOME in line and "write instead:" in line
    assert "HOME" in err.hint


# -- a pinned model is judged with the paths as written ----------------------------------------

ZONE = "/usr/share/zoneinfo/Etc/UTC"


def test_a_pinned_model_is_judged_with_the_path_as_written() -> None:
    """compose.judged.json names where a link led (core.admission.artifact.pinned); the judge
    names the path the bundle wrote and judges both forms, so a linked /etc/localtime is the
    protected file its allowance names, not a path outside the roots."""
    model = {"services": {"web": {"image": "x", "volumes": [bind(ZONE, True)]}}}
    resolved = {LOCALTIME: ZONE}
    (found,) = policy.judge(model, Rules(protected=PROTECTED), resolved)
    assert (found.code, found.allow_with) == (
        Code.POLICY_PROTECTED_PATH,
        "policy.services.web.read_only_files: [/etc/localtime]",
    )
    assert found.asks == f"{LOCALTIME} reaches /etc (read-only, one file)"
    both = frozenset({LOCALTIME, ZONE})  # agent.policy keeps an entry as written and resolved
    allowed = Rules(protected=PROTECTED, allow=Allow(read_only_files=both))
    assert policy.judge(model, allowed, resolved) == []
    # a link outside the roots that leads inside them: both forms must pass
    linked = {"services": {"web": {"image": "x", "volumes": [bind("/srv/app/d", False)]}}}
    rules = Rules(allow=Allow(bind_roots=("/srv/app",)))
    (outside,) = policy.judge(linked, rules, {"/opt/link/d": "/srv/app/d"})
    assert outside.asks.startswith("/opt/link/d (-> /srv/app/d) is outside the allowed roots")
    assert policy.judge(linked, rules, {"/srv/app/d": "/srv/app/d"}) == []
