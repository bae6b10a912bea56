"""core.commands.diff: what ``up`` would do to each service and why; the compose diff is masked."""

from __future__ import annotations

import json

import yaml
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.commands import diff
from monky_deployd.core.commands.diff import ImageRow, ServiceRow
from monky_deployd.core.records import reasons
from monky_deployd.core.records.reasons import KeyChanges, Reason
from monky_deployd.core.render.mask import Masker


def compose(**services: dict[str, object]) -> str:
    return yaml.safe_dump({"services": services})


OLD = compose(
    web={"image": "h/web:1", "environment": {"X": "${A}"}},
    db={"image": "h/db:1"},
    gone={"image": "h/g:1"},
)
NEW = compose(
    web={"image": "h/web:1", "environment": {"X": "${A}"}},
    db={"image": "h/db:1", "command": ["x"]},
    job={"image": "h/job:1", "env_file": [".env"]},
)


def test_each_service_gets_its_action_and_why() -> None:
    rows = diff.services(
        OLD,
        NEW,
        relabel_all=False,
        env=KeyChanges(changed=("A",)),
        images=(ImageRow("db", "h/db:1", "h/db@sha256:1", "sha256:2"),),
    )
    assert rows == (
        ServiceRow("db", "recreate", ("definition changed", "image digest changed")),
        ServiceRow("gone", "remove", ("gone from the compose file",)),
        ServiceRow("job", "create", ("new service",)),
        ServiceRow("web", "recreate", (".env changed (A)",)),
    )


def test_an_unchanged_service_is_kept_unless_an_old_record_relabels_all() -> None:
    same = diff.services(OLD, OLD, relabel_all=False, env=KeyChanges(), images=())
    assert {r.action for r in same} == {"keep"}
    moved = diff.services(OLD, OLD, relabel_all=True, env=KeyChanges(), images=())
    assert {r.why for r in moved} == {("new revision label",)}


def test_the_compose_diff_is_unified_and_masked() -> None:
    text = diff.compose_diff(
        "a: 1\n", "a: 2\npassword: hunter2-secret\n", "old", "new", Masker(["hunter2-secret"])
    )
    assert text.startswith("--- old\n+++ new\n")
    assert "+a: 2\n" in text and "hunter2-secret" not in text and "***" in text
    assert diff.compose_diff("a\n", "a\n", "o", "n") == ""


def test_changes_and_the_json_schema() -> None:
    empty = diff.Diff("noop", "all good", "r1", "r1")
    assert not empty.changes and empty.as_json()["changes"] is False
    found = diff.Diff(
        "apply",
        "new",
        "r1",
        "r2",
        reasons=(Reason("REVISION", "r1 -> r2"),),
        images=(ImageRow("web", "h/w:1", "h/w@sha256:1", "sha256:2"),),
    )
    body = found.as_json()
    assert body["changes"] is True and body["reasons"] == [
        {"kind": "REVISION", "detail": "r1 -> r2"}
    ]
    assert body["images"][0]["before"] == "sha256:1" and body["images"][0]["changed"] is True
    assert set(body) == {
        "schema", "changes", "plan", "reason", "applied", "desired", "project", "reasons",
        "compose", "model", "env", "secrets", "images", "services", "token", "notes",
    }  # fmt: skip
    assert "changes: yes" in found.as_text()


service_names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
definitions = st.fixed_dictionaries({"image": st.sampled_from(["h/a:1", "h/b:2"])})
service_maps = st.dictionaries(service_names, definitions, max_size=6)


@given(old=service_maps, new=service_maps, moved=st.booleans())
def test_actions_follow_the_service_sets(
    old: dict[str, dict[str, str]], new: dict[str, dict[str, str]], moved: bool
) -> None:
    rows = diff.services(
        yaml.safe_dump({"services": old}),
        yaml.safe_dump({"services": new}),
        relabel_all=moved,
        env=KeyChanges(),
        images=(),
    )
    by = {r.name: r.action for r in rows}
    assert {n for n, a in by.items() if a == "create"} == set(new) - set(old)
    assert {n for n, a in by.items() if a == "remove"} == set(old) - set(new)
    both = set(old) & set(new)
    want = {n for n in both if moved or old[n] != new[n]}
    assert {n for n, a in by.items() if a == "recreate"} == want
    assert {n for n, a in by.items() if a == "keep"} == both - want


env_values = st.dictionaries(
    st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_characters="\n"), min_size=1, max_size=12).map(
        lambda v: f"VAL<{v}>"
    ),
    max_size=6,
)


@given(old=env_values, new=env_values)
def test_no_value_reaches_the_plan_output(old: dict[str, str], new: dict[str, str]) -> None:
    key = b"k" * 32

    def text(env: dict[str, str]) -> str:
        return "".join(f"{k}={v}\n" for k, v in env.items())

    a = reasons.fingerprint(key, "services: {}\n", text(old), old)
    b = reasons.fingerprint(key, "services: {}\n", text(new), new)
    found = diff.Diff(
        "apply",
        "r1 -> r2",
        "r1",
        "r2",
        reasons=reasons.explain(reasons.ReasonFacts("r2", "r1", a, b)),
        env=reasons.key_changes(a.env, b.env),
        secrets=reasons.key_changes(a.secrets, b.secrets),
    )
    shown = found.as_text() + json.dumps(found.as_json())
    for value in (*old.values(), *new.values()):
        assert value not in shown
