from __future__ import annotations

from typing import Any

import pytest

from monky_deployd.core.bundle import validate
from monky_deployd.core.errors import BundleError


def good() -> dict[str, Any]:
    return {
        "project": "shop",
        "compose": "services:\n  web:\n    image: harbor.example.net/env-dev-08/web:1.4\n",
        "env_template": "# substitutes every ${VAR}\nDB_PASSWORD=${DB_PASSWORD}\n",
        "manifest": [
            {"name": "DB_PASSWORD", "path": "envs/env-dev-08/app", "key": "db_password"},
            {
                "name": "registry",
                "path": "envs/env-dev-08/registry",
                "key": "robot",
                "use": "registry-auth",
            },
        ],
        "registry_host": "harbor.example.net",
        "disk_need_bytes": 2147483648,
    }


def test_contract_example_is_valid() -> None:
    b = validate("r42", good())
    assert b.project == "shop" and b.services == ("web",)
    assert [e.name for e in b.env_entries] == ["DB_PASSWORD"]
    assert [e.name for e in b.registry_entries] == ["registry"]
    assert b.disk_need_bytes == 2147483648


def test_optional_keys_may_be_absent() -> None:
    raw = good()
    for key in ("disk_need_bytes", "registry_host", "env_template"):
        raw.pop(key)
    raw["manifest"] = []
    b = validate("r1", raw)
    assert b.disk_need_bytes is None and b.registry_host is None and b.env_template == ""


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda b: b.update(project="Shop!"), "'project'"),
        (lambda b: b.update(compose=""), "'compose'"),
        (lambda b: b.update(compose="- a\n- b\n"), "must be a YAML mapping"),
        (lambda b: b.update(compose="services: [\n"), "not valid YAML"),
        (lambda b: b.update(compose="version: '3'\n"), "'compose.services'"),
        (lambda b: b["manifest"][0].update(name="DB-PASSWORD"), "'manifest[0].name'"),
        (lambda b: b["manifest"][0].update(path="envs/../other/app"), "'manifest[0].path'"),
        (lambda b: b["manifest"][0].update(path="/etc/passwd"), "'manifest[0].path'"),
        (lambda b: b["manifest"][0].update(key=""), "'manifest[0].key'"),
        (lambda b: b["manifest"][1].update(use="ssh-key"), "'manifest[1].use'"),
        (lambda b: b["manifest"].append(dict(b["manifest"][0])), "appears twice"),
        (lambda b: b.update(manifest={"a": 1}), "'manifest'"),
        (lambda b: b.update(disk_need_bytes=-1), "'disk_need_bytes'"),
        (lambda b: b.update(disk_need_bytes=True), "'disk_need_bytes'"),
        (lambda b: b.update(extra=1), "'extra': unknown key"),
    ],
)
def test_malformed_bundles_are_refused_with_where(mutate: Any, where: str) -> None:
    raw = good()
    mutate(raw)
    with pytest.raises(BundleError) as info:
        validate("r42", raw)
    assert info.value.code == "BUNDLE_INVALID"
    assert info.value.outcome == "refused"
    assert where in info.value.message


def test_revision_with_path_separators_is_refused() -> None:
    with pytest.raises(BundleError, match="'revision'"):
        validate("../r1", good())


def test_all_problems_listed_at_once() -> None:
    raw = good()
    raw["project"] = "BAD"
    raw["compose"] = ""
    with pytest.raises(BundleError) as info:
        validate("r1", raw)
    assert "'project'" in info.value.message and "'compose'" in info.value.message
