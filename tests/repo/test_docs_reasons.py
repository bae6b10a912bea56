"""The documents say what the code does: the report's fields and ``reasons`` kinds in
PROTOCOL.md, ``plan``'s JSON keys and exit statuses in OPERATIONS.md."""

from __future__ import annotations

import re
from pathlib import Path

from monky_deployd.agent.commands import plan
from monky_deployd.core.commands import diff
from monky_deployd.core.records import reasons
from monky_deployd.core.wire import report

ROOT = Path(__file__).resolve().parents[2]


def test_every_report_field_is_in_protocol_md_example() -> None:
    text = (ROOT / "PROTOCOL.md").read_text()
    example = text[text.index("### `POST /v1/envs/{env}/reports`") :]
    example = example[: example.index("```\n", example.index("```json") + 7)]
    for name in report.ReportBody.model_fields:
        assert f'"{name}"' in example, f"report field {name} missing from PROTOCOL.md's example"


def test_every_reason_kind_has_a_row_in_protocol_md() -> None:
    rows = set(re.findall(r"^\| `([A-Z_]+)` \| ", (ROOT / "PROTOCOL.md").read_text(), re.M))
    assert set(reasons.KINDS) <= rows


def test_every_plan_json_key_is_documented() -> None:
    text = (ROOT / "OPERATIONS.md").read_text()
    section = text[text.index("## Plan: what the next apply would change") :]
    section = section[: section.index("\n## ", 5)]
    documented = set(re.findall(r"`([a-z_]+)`", section))
    keys = set(diff.Diff("noop", "").as_json()) | {"error"}
    assert keys <= documented, sorted(keys - documented)
    for status in (plan.EXIT_NO_CHANGE, plan.EXIT_CHANGES, plan.EXIT_ERROR):
        assert re.search(rf"^\| {status} \| ", section, re.M)
