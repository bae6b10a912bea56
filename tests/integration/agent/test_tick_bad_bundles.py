"""Hostile bundles and check-in bodies through a whole in-process tick against the loopback fakes:
each class (alias bombs, deep nesting, lone surrogates, relative binds, foreign registries, deeply
nested check-in JSON) ends as its named refusal, never INTERNAL, and nothing is written to the
state dir (no revision directory, no docker config, no applied record).

The inputs are generated (hypothesis), not the issue's examples."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd import config as config_mod
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.core.admission.composefile import MAX_NODES
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.fakes.estate import Estate

ENV = "env-int-01"
GOOD: dict[str, Any] = {
    "project": "shop",
    "compose": "services:\n  web:\n    image: 127.0.0.1:1/web:1\n",
    "env_template": "",
    "manifest": [],
}
FAST = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def estate() -> Iterator[Estate]:
    with Estate(env=ENV) as est:
        yield est


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One state dir for the module: the token and host facts carry over between ticks (as on a
    box), so each example costs one check-in, not a login and a `docker version`."""
    return tmp_path_factory.mktemp("bad-bundles") / "state"


def tick(estate: Estate, state: Path) -> TickRecord:
    raw = estate.config(state_dir=state, grant_file=estate.write_grant(state.parent / "g.jwt"))
    return run_tick(config_mod.parse(raw, "test"), clock=estate.clock.now)


def written(state: Path) -> list[str]:
    """What a refused tick must not have left: project files, docker config, applied record."""
    found = [str(p.relative_to(state)) for p in (state / "revisions").rglob("*")]
    found += [n for n in ("applied.json",) if (state / n).exists()]
    found += [str(p.relative_to(state)) for p in (state / "docker").rglob("*")]
    return found


_REVISIONS = itertools.count(1)


def refused(estate: Estate, state: Path, bundle: dict[str, Any], code: str) -> None:
    """Each bad bundle is published as a new revision, as tenancy would: a refused revision is
    then in backoff, and only a new desired revision pre-empts it on the next tick."""
    estate.tenancy.clear_raw_checkin()
    estate.tenancy.set_desired(f"r{next(_REVISIONS)}", bundle)
    rec = tick(estate, state)
    assert (rec.outcome, rec.code) == ("refused", code), rec.message
    assert written(state) == []


def alias_bomb(width: int, levels: int) -> str:
    lines = [f"x-l0: &l0 [{', '.join(['v'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"x-l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + f"\nservices:\n  web:\n    image: a/b\n    x-y: *l{levels - 1}\n"


@FAST
@given(width=st.integers(4, 12), levels=st.integers(6, 9), data=st.data())
def test_alias_bombs_are_refused_before_anything_is_written(
    estate: Estate, state: Path, width: int, levels: int, data: Any
) -> None:
    if width**levels <= MAX_NODES:
        levels += 3
    refused(
        estate,
        state,
        dict(GOOD, compose=alias_bomb(width, levels)),
        "BUNDLE_COMPOSE_TOO_COMPLEX",
    )


@FAST
@given(depth=st.integers(65, 3000), flow=st.booleans())
def test_deep_yaml_is_refused(estate: Estate, state: Path, depth: int, flow: bool) -> None:
    if flow:
        compose = f"services:\n  web:\n    image: a/b\nx-deep: {'[' * depth}{']' * depth}\n"
    else:
        compose = "services:\n  web:\n    image: a/b\n" + "".join(
            f"{' ' * i}x{i}:\n"
            for i in range(min(depth, 1200))  # (indent grows as depth²)
        )
    refused(estate, state, dict(GOOD, compose=compose), "BUNDLE_COMPOSE_TOO_COMPLEX")


@FAST
@given(
    field=st.sampled_from(["env_template", "compose", "project"]),
    surrogate=st.integers(0xD800, 0xDFFF).map(chr),
    prefix=st.text(st.characters(codec="utf-8"), max_size=20),
)
def test_lone_surrogates_are_refused(
    estate: Estate,
    state: Path,
    field: str,
    surrogate: str,
    prefix: str,
) -> None:
    bundle = dict(GOOD)
    bundle[field] = prefix + surrogate + str(bundle[field])
    refused(estate, state, bundle, "BUNDLE_INVALID")


@FAST
@given(
    source=st.sampled_from([".", "./", "../", "${", "$"]).flatmap(
        lambda head: st.from_regex(r"[a-z_]{1,8}", fullmatch=True).map(lambda t: head + t)
    ),
    long=st.booleans(),
)
def test_relative_binds_are_refused(estate: Estate, state: Path, source: str, long: bool) -> None:
    if source.startswith("${"):
        source += "}"
    vol: Any = {"type": "bind", "source": source, "target": "/d"} if long else f"{source}:/d"
    compose = json.dumps({"services": {"web": {"image": "a/b", "volumes": [vol]}}})
    refused(estate, state, dict(GOOD, compose=compose), "BUNDLE_RELATIVE_BIND")


@FAST
@given(
    image=st.sampled_from(["busybox", "library/redis:7", "team/app@sha256:00", "quay.io/x/y"]),
    host=st.from_regex(r"[a-z]{1,10}\.example\.(net|org)(:[1-9][0-9]{2,3})?", fullmatch=True),
)
def test_images_from_another_registry_are_refused(
    estate: Estate, state: Path, image: str, host: str
) -> None:
    compose = json.dumps({"services": {"web": {"image": image}}})
    bundle = dict(GOOD, compose=compose, registry_host=host)
    refused(estate, state, bundle, "BUNDLE_INVALID")


@FAST
@given(depth=st.integers(10_000, 150_000), opener=st.sampled_from(["[", '{"a":']))
def test_deeply_nested_checkin_bodies_are_a_bad_response(
    estate: Estate, state: Path, depth: int, opener: str
) -> None:
    closer = "]" if opener == "[" else "}"
    body = ('{"revision": "r1", "bundle": ' + opener * depth + "1" + closer * depth + "}").encode()
    estate.tenancy.set_raw_checkin(200, body)
    try:
        rec = tick(estate, state)
    finally:
        estate.tenancy.clear_raw_checkin()
    assert rec.code == "TENANCY_BAD_RESPONSE", rec.message
    assert written(state) == []


def test_a_good_bundle_still_reaches_the_box_steps(
    estate: Estate, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # (last in the file: its tick may stage)
    """The control: the same harness gets past every bundle check with a sound bundle (it then
    stops at the engine or the registry, which this test does not provide)."""
    estate.tenancy.clear_raw_checkin()
    estate.tenancy.set_desired("r1", GOOD)
    with caplog.at_level(logging.INFO):
        rec = tick(estate, tmp_path / "state")
    assert rec.code not in ("BUNDLE_INVALID", "BUNDLE_COMPOSE_TOO_COMPLEX", "INTERNAL")
    assert {"bundle", "secrets", "render", "registry"} <= {p.name for p in rec.phases if p.ok}


def test_a_env_too_large_for_a_container_is_refused_before_the_box_changes(
    estate: Estate, state: Path
) -> None:
    """A template whose variables, given whole to a service by env_file, exceed what Linux's
    exec takes (like the issue's 190,001 one-word lines): ENV_TOO_LARGE, nothing written."""
    template = "".join(f"K{i:07d}={'v' * 110}\n" for i in range(20_000))
    with_env_file = {
        **GOOD,
        "compose": "services:\n  web:\n    image: 127.0.0.1:1/web:1\n    env_file: [.env]\n",
        "env_template": template,
    }
    refused(estate, state, with_env_file, "ENV_TOO_LARGE")


@FAST
@given(
    st.from_regex(r"rel-[a-z0-9]{6,12}", fullmatch=True),
    st.text(st.sampled_from("ab$\"'\\ é-"), max_size=6),
    st.text(st.sampled_from("xy$\"'\\ ü-"), max_size=6),
)
def test_a_secret_holding_the_revision_name_leaves_the_reports_identifiers_alone(
    estate: Estate, state: Path, name: str, before: str, after: str
) -> None:
    """A whole tick that read a secret whose value contains the revision's name (and is then
    refused): the report tenancy receives names that revision, its tick and its code as they
    are (before, ``"revision": "***"``)."""
    revision = f"{name}-{next(_REVISIONS)}"
    secret = before + revision + after
    estate.bao.set_secret(f"envs/{ENV}/app", {"pw": secret})
    bundle = {
        **GOOD,
        "env_template": "PW=${PW}\nOTHER=${NOT_IN_THE_MANIFEST}\n",
        "manifest": [{"name": "PW", "path": f"envs/{ENV}/app", "key": "pw"}],
    }
    estate.tenancy.clear_raw_checkin()
    estate.tenancy.set_desired(revision, bundle)
    rec = tick(estate, state)
    assert rec.code == "ENV_INCOMPLETE", rec.message
    report = estate.tenancy.reports[-1]
    assert (report["revision"], report["tick_id"], report["code"], report["outcome"]) == (
        revision,
        rec.tick_id,
        "ENV_INCOMPLETE",
        "refused",
    )
    assert [p["name"] for p in report["phases"]][-1] == "render"
    assert secret not in report["message"] + report["detail"]
