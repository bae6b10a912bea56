"""core.diff: what ``up`` would do to each service and why; the compose diff is masked."""

from __future__ import annotations

import yaml

from monky_deployd.core import diff
from monky_deployd.core.diff import ImageRow, ServiceRow
from monky_deployd.core.mask import Masker
from monky_deployd.core.reasons import KeyChanges, Reason


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
        revision_changed=False,
        env=KeyChanges(changed=("A",)),
        images=(ImageRow("db", "h/db:1", "h/db@sha256:1", "sha256:2"),),
    )
    assert rows == (
        ServiceRow("db", "recreate", ("definition changed", "image digest changed")),
        ServiceRow("gone", "remove", ("gone from the compose file",)),
        ServiceRow("job", "create", ("new service",)),
        ServiceRow("web", "recreate", (".env changed (A)",)),
    )


def test_an_unchanged_service_is_kept_unless_the_revision_label_moves() -> None:
    same = diff.services(OLD, OLD, revision_changed=False, env=KeyChanges(), images=())
    assert {r.action for r in same} == {"keep"}
    moved = diff.services(OLD, OLD, revision_changed=True, env=KeyChanges(), images=())
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
        "compose", "env", "secrets", "images", "services", "token", "notes",
    }  # fmt: skip
    assert "changes: yes" in found.as_text()
