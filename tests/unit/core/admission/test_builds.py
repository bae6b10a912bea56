"""Issue 45: builds off by default, what a build reads copied, box-wide names and weights
(core.admission.builds, policy's build and namespace judges, cgroup's weights)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import builds, policy
from monky_deployd.core.admission.host import host_paths
from monky_deployd.core.admission.keys import SHAPES, Kind
from monky_deployd.core.admission.rules import (
    BLKIO_DEFAULT,
    CPU_SHARES_DEFAULT,
    Allow,
    Rules,
    inside,
    normpath,
)
from monky_deployd.core.errors import Code

RELEASE = "/var/lib/monky-deployd/revisions/r1"


def judged(svc: dict[str, Any], rules: Rules, top: dict[str, Any] | None = None) -> list[Any]:
    model = {"name": "p", "services": {"web": {"image": "x", **svc}}, **(top or {})}
    return policy.judge(model, rules, release_dir=RELEASE)


# -- builds off by default -----------------------------------------------------------------------


@given(st.sampled_from([None, "web", "other"]))
def test_a_build_is_refused_unless_the_box_allows_it(scope: str | None) -> None:
    svc = {"build": {"context": RELEASE, "dockerfile_inline": "FROM scratch\n"}}
    found = judged(svc, Rules())
    assert [(v.key, v.code, v.allow_with) for v in found] == [
        ("build", Code.POLICY_BUILD, "policy.services.web.build: true")
    ]
    assert "image:" in found[0].rewrite and "drop `build:`" in found[0].rewrite
    assert "write instead:" in found[0].line()
    err = policy.refusal("r2", found)
    assert err.code is Code.POLICY_BUILD
    allow = Allow(build=True)
    rules = Rules(allow=allow) if scope is None else Rules(services={scope: allow})
    assert bool(judged(svc, rules)) == (scope == "other")


# -- build.network is network_mode ----------------------------------------------------------------

MODES = st.one_of(
    st.sampled_from(
        ["host", "HOST", " host", "none", "default", "bridge", "p_back", "back", "other_net"]
    ),
    st.builds(
        lambda head, name: f"{head}:{name}",
        st.sampled_from(["container", "CONTAINER", "Container"]),
        st.sampled_from(["other-app-web-1", "x", ""]),
    ),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12).filter(
        lambda t: not t.startswith("service:")
    ),
)


@given(
    MODES,
    st.fixed_dictionaries(
        {},
        optional={
            "host_namespaces": st.just(frozenset({"network"})),
            "networks": st.just(frozenset({"default", "other_net"})),
        },
    ),
)
def test_build_network_is_judged_as_network_mode(mode: str, extra: dict[str, Any]) -> None:
    """One judge for both (``policy.namespace_mode`` and ``names.namespaces``): whatever the
    value and the allowances, ``build.network`` gets the verdict ``network_mode`` gets."""
    rules = Rules(allow=Allow(build=True, **extra))
    top = {"networks": {"back": {"name": "p_back"}}}
    as_mode = judged({"network_mode": mode}, rules, top)
    as_build = judged({"build": {"context": RELEASE, "network": mode}}, rules, top)

    def verdicts(found: list[Any], key: str) -> set[tuple[str, str, Code]]:
        return {(v.asks, v.allow_with, v.code) for v in found if v.key == key}

    assert verdicts(as_build, "build.network") == verdicts(as_mode, "network_mode")
    if mode.strip().lower().startswith("container:"):
        assert verdicts(as_build, "build.network"), "another container's network passed"


# -- weights ---------------------------------------------------------------------------------------


@given(
    st.integers(0, 300_000),
    st.sampled_from([0, 512, 1024, 2048, 262144]),
    st.sampled_from([None, "web", "other"]),
)
def test_cpu_shares_above_the_default_needs_an_allowance(
    shares: int, allowed: int, scope: str | None
) -> None:
    allow = Allow(cpu_shares=allowed)
    rules = Rules(allow=allow) if scope is None else Rules(services={scope: allow})
    limit = (allowed if scope != "other" else 0) or CPU_SHARES_DEFAULT
    found = judged({"cpu_shares": shares}, rules)
    assert bool(found) == (shares > limit)
    if found:
        assert [(v.key, v.code) for v in found] == [("cpu_shares", Code.POLICY_REFUSED)]
        assert found[0].allow_with.endswith(f".cpu_shares: {shares}")


@given(
    st.sampled_from(["weight", "weight_device"]),
    st.integers(0, 1000),
    st.sampled_from([0, 100, 800]),
    st.sampled_from(sorted(BLKIO_DEFAULT.values())),
)
def test_a_block_io_weight_above_the_engines_default_needs_an_allowance(
    key: str, weight: int, allowed: int, default: int
) -> None:
    if key == "weight":
        blkio: dict[str, Any] = {"weight": weight}
    else:
        blkio = {"weight_device": [{"path": "/dev/sda", "weight": weight}]}
    rules = Rules(
        allow=Allow(blkio_weight=allowed, devices=frozenset({"/dev/sda"})), blkio_default=default
    )
    found = judged({"blkio_config": blkio}, rules)
    assert bool(found) == (weight > (allowed or default))
    if found:
        assert [v.key for v in found] == [f"blkio_config.{key}"]
        assert found[0].allow_with == f"policy.services.web.blkio_weight: {weight}"


def test_a_weight_that_is_no_number_is_refused() -> None:
    found = judged({"cpu_shares": "lots"}, Rules(allow=Allow(cpu_shares=262144)))
    assert [(v.key, v.asks) for v in found] == [("cpu_shares", "lots (not a number)")]


# the keys that can give one container more than its share of what every container shares
WEIGHTED = {("service", "cpu_shares"), ("service", "blkio_config")}
REALTIME = {("service", "cpu_rt_runtime"), ("service", "cpu_rt_period")}


def test_every_weight_key_of_the_table_is_judged_and_refused_at_its_highest() -> None:
    """The class: every key the table gives to the weights judge, and the real-time budgets
    (refused outright), over compose's largest values."""
    weights = {(s, k) for s, t in SHAPES.items() for k, key in t.items() if key.why == "weights"}
    assert weights == WEIGHTED
    assert all(SHAPES[s][k].kind is Kind.REFUSED for s, k in REALTIME)
    highest = {
        "cpu_shares": 262144,
        "blkio_config": {"weight": 1000, "weight_device": [{"path": "/dev/sda", "weight": 1000}]},
    }
    rules = Rules(allow=Allow(devices=frozenset({"/dev/sda"})))
    for _, key in sorted(weights):
        found = judged({key: highest[key]}, rules)
        assert found and all(v.key.startswith(key) for v in found), key
    default = Rules(allow=Allow(devices=frozenset({"/dev/sda"})), blkio_default=500)
    assert judged({"cpu_shares": 1024, "blkio_config": {"weight": 500}}, default) == []


# -- what a build reads is a copy -----------------------------------------------------------------

BUILD_PATH_KEYS = {
    k for k, key in SHAPES["build"].items() if key.why in ("host_paths", "build_cache")
}


def _build_model(path: str) -> dict[str, Any]:
    return {
        "context": path,
        "dockerfile": "../Dockerfile.web",
        "additional_contexts": {"assets": f"{path}/assets", "img": "docker-image://alpine"},
        "secrets": ["token"],
        "cache_from": [f"type=local,src={path}/cache"],
        "cache_to": [f"type=local,dest={path}/cache"],
    }


@given(st.sampled_from(["/srv/app/ctx", "/srv/app/a b", "/srv/app/ctx/../other"]))
def test_every_build_path_is_copied_or_refused(path: str) -> None:
    """The class: every host path a build reads (``host_paths``' build keys, each key of the
    table's build shape that names one) lies inside the release once the model is rewritten,
    or the policy refuses it whatever the roots."""
    assert {
        "additional_contexts",
        "cache_from",
        "cache_to",
        "context",
        "dockerfile",
        "secrets",
    } == BUILD_PATH_KEYS
    model = {
        "name": "p",
        "services": {"web": {"image": "p-web", "build": _build_model(path)}},
        "secrets": {"token": {"file": "/srv/app/token"}},
    }
    rewritten, plan = builds.copies(model, {}, RELEASE)
    refused = {
        v.key
        for v in policy.judge(model, Rules(allow=Allow(build=True, bind_roots=("/",))))
        if v.code is Code.POLICY_BUILD
    }
    keys = {h.key.split(".")[1] for h in host_paths(model)}
    assert keys == BUILD_PATH_KEYS
    for found in host_paths(rewritten):
        if found.key in refused:
            continue
        assert inside(found.path, RELEASE), found
    assert refused == {"build.secrets", "build.cache_from", "build.cache_to"}
    assert [(c.key, c.dest, c.file) for c in plan] == [
        ("build.context", "build/0/context", False),
        ("build.dockerfile", "build/0/Dockerfile", True),
        ("build.additional_contexts.assets", "build/0/extra/0", False),
    ]
    assert plan[0].source == normpath(path) and plan[2].source == normpath(f"{path}/assets")


@pytest.mark.parametrize(
    ("dockerfile", "read"),
    [
        ("Dockerfile", "/srv/app/ctx/Dockerfile"),
        ("sub/../df/Web", "/srv/app/ctx/df/Web"),
        ("/srv/app/ctx/D", "/srv/app/ctx/D"),
        ("../D", "/srv/app/D"),
    ],
)
def test_a_dockerfile_is_always_a_file_of_its_own_in_the_copy(dockerfile: str, read: str) -> None:
    """The docker CLI follows a Dockerfile that is a link and sends what it reads: the
    Dockerfile is copied on its own (a regular file, no link followed), wherever it lies."""
    model = {"services": {"w": {"build": {"context": "/srv/app/ctx", "dockerfile": dockerfile}}}}
    rewritten, plan = builds.copies(model, {"/srv/app/ctx": "/data/ctx"}, RELEASE)
    build = rewritten["services"]["w"]["build"]  # type: ignore[index]
    assert build == {
        "context": f"{RELEASE}/build/0/context",
        "dockerfile": f"{RELEASE}/build/0/Dockerfile",
    }
    assert plan == [
        builds.Copy("w", "build.context", "/data/ctx", "build/0/context"),
        builds.Copy("w", "build.dockerfile", read, "build/0/Dockerfile", True),
    ]


def test_a_context_inside_the_release_copies_as_an_empty_directory() -> None:
    model = {"services": {"w": {"build": {"context": RELEASE, "dockerfile_inline": "FROM x"}}}}
    _, plan = builds.copies(model, {}, RELEASE)
    assert plan == [builds.Copy("w", "build.context", "", "build/0/context")]


# -- box-wide names --------------------------------------------------------------------------------


def tagged(image: str, build: bool) -> dict[str, Any]:
    svc: dict[str, Any] = {"image": image}
    if build:
        svc["build"] = {"context": "/srv/app"}
    return {"name": "mine", "services": {"web": svc}}


@given(
    st.sampled_from(["shop", "mine", None]),
    st.booleans(),
    st.booleans(),
    st.sampled_from(
        [("shop-web", "shop-web:latest"), ("docker.io/library/shop-web:1", "shop-web:1")]
    ),
)
def test_a_tag_another_projects_containers_run_never_moves(
    owner: str | None, built: bool, pulled: bool, names: tuple[str, str]
) -> None:
    written, ref = names
    users = {ref: builds.User(frozenset({owner}), pulled)}
    found = builds.foreign_tags(tagged(written, built), "mine", users)
    moves = owner != "mine" and (built or not pulled)
    assert bool(found) == moves
    if found:
        assert [(v.service, v.key, v.code) for v in found] == [
            ("web", "image", Code.POLICY_FOREIGN_TAG)
        ]
        assert ("project shop" if owner else "made by hand") in found[0].asks
        assert "<registry>/<project>/<service>" in found[0].rewrite
    assert builds.foreign_tags(tagged(written, built), "mine", {}) == []
    # a project this agent started itself (renamed since) is its own, never another app
    renamed = builds.foreign_tags(tagged(written, built), "mine", users, frozenset({"shop"}))
    assert bool(renamed) == (owner is None and (built or not pulled))


def test_image_references_are_compared_as_the_engine_keys_them() -> None:
    assert builds.ref("x") == "x:latest"
    assert builds.ref("docker.io/library/x:1") == "x:1"
    assert builds.ref("reg:5000/a/b") == "reg:5000/a/b:latest"
    assert builds.ref("a@sha256:00") == "a@sha256:00"
    # the engine's aliases of one Docker Hub tag (tests/integration/box/test_image_refs.py)
    for alias in ("index.docker.io/team/app:1", "docker.io/team/app:1", "team/app:1"):
        assert builds.ref(alias) == "team/app:1"
    assert builds.ref("library/x:1") == builds.ref("index.docker.io/library/x:1") == "x:1"
    assert builds.ref("docker.io/library/a/b") == "library/a/b:latest"
    assert builds.ref("registry-1.docker.io/a/b:1") == "registry-1.docker.io/a/b:1"


def test_every_refusal_of_this_issue_says_how_to_write_the_bundle_instead() -> None:
    """``bundle check`` prints a refusal's rewrite: each of these carries one."""
    rules = Rules(blkio_default=500)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"build": {"context": "/srv/app"}}, "build"),
        ({"build": {"context": "/srv/app", "network": "container:x"}}, "build.network"),
        ({"network_mode": "container:x"}, "network_mode"),
        ({"cpu_shares": 4096}, "cpu_shares"),
        ({"blkio_config": {"weight": 900}}, "blkio_config.weight"),
        ({"build": {"context": "/srv/app", "cache_to": ["type=local,dest=/c"]}}, "build.cache_to"),
    ]
    for svc, key in cases:
        found = [v for v in judged(svc, rules) if v.key == key]
        assert found and all(v.rewrite for v in found), (key, found)
        assert all("write instead: " in v.line() for v in found)
