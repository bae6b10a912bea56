from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission.bundle import Bundle, ManifestEntry, validate
from monky_deployd.core.admission.rules import bind_rewrite
from monky_deployd.core.faults import DeployError


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


def test_a_bundle_without_secrets_needs_no_manifest() -> None:
    b = validate("r1", {"project": "shop", "compose": good()["compose"]})
    assert b.manifest == () and b.env_template == "" and b.services == ("web",)


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
    with pytest.raises(DeployError) as info:
        validate("r42", raw)
    assert info.value.code == "BUNDLE_INVALID"
    assert info.value.outcome == "refused"
    assert where in info.value.message


def test_revision_with_path_separators_is_refused() -> None:
    with pytest.raises(DeployError, match="'revision'"):
        validate("../r1", good())


def test_all_problems_listed_at_once() -> None:
    raw = good()
    raw["project"] = "BAD"
    raw["compose"] = ""
    with pytest.raises(DeployError) as info:
        validate("r1", raw)
    assert "'project'" in info.value.message and "'compose'" in info.value.message


# -- what the operator reads: every problem line, word for word -------------------------------


def problems(revision: str, raw: dict[str, Any]) -> list[str]:
    with pytest.raises(DeployError) as info:
        validate(revision, raw)
    err = info.value
    assert (err.code, err.outcome) == ("BUNDLE_INVALID", "refused")
    assert err.hint == "the bundle published to tenancy for this environment"
    head, *lines = err.message.split("\n")
    assert head == f"the bundle for revision {revision!r} is malformed, nothing was changed:"
    return lines


def test_every_problem_is_one_line_in_the_order_checked() -> None:
    raw = {
        "project": "BAD!",
        "compose": "- a\n",
        "env_template": 5,
        "manifest": [
            "x",
            {"name": "", "path": "a//b", "key": "", "use": "ssh", "extra": 1},
            {"name": 7},
        ],
        "registry_host": "",
        "disk_need_bytes": -1,
        "zzz": 1,
    }
    assert problems("../r", raw) == [
        "at 'revision': must be 1-64 of A-Z a-z 0-9 . _ - starting with a letter or digit",
        "at 'zzz': unknown key",
        "at 'project': must match ^[a-z0-9][a-z0-9_-]{0,62}$",
        "at 'compose': must be a YAML mapping, found list",
        "at 'env_template': must be a string",
        "at 'manifest[0]': must be a mapping with name, path and key",
        "at 'manifest[1].extra': unknown key",
        "at 'manifest[1].use': unknown use 'ssh' (only 'registry-auth')",
        "at 'manifest[1].name': must be a non-empty string",
        "at 'manifest[1].path': must be a relative path of [A-Za-z0-9._-] segments without '..'",
        "at 'manifest[1].key': must be a non-empty string",
        "at 'manifest[2].name': must be a non-empty string",
        "at 'manifest[2].path': must be a relative path of [A-Za-z0-9._-] segments without '..'",
        "at 'manifest[2].key': must be a non-empty string",
        "at 'registry_host': must be a non-empty string",
        "at 'disk_need_bytes': must be a non-negative integer number of bytes",
    ]


def test_operator_line_carries_code_message_and_hint() -> None:
    raw = good()
    raw["manifest"] = 3
    with pytest.raises(DeployError) as info:
        validate("r7", raw)
    assert str(info.value) == (
        "BUNDLE_INVALID: the bundle for revision 'r7' is malformed, nothing was changed:\n"
        "at 'manifest': must be a list. Check: the bundle published to tenancy for this environment"
    )


@pytest.mark.parametrize(
    ("compose", "line"),
    [
        ("", "at 'compose': must be a non-empty compose file"),
        (" \n\t\n", "at 'compose': must be a non-empty compose file"),
        (["services"], "at 'compose': must be a non-empty compose file"),
        ("a: b\nc: d: e\n", "at 'compose': is not valid YAML at line 2"),
        ("\t- x", "at 'compose': is not valid YAML at line 1"),
        # PyYAML's reader refuses a control character before any line is known (no mark)
        ("services:\n  web: \x07\n", "at 'compose': is not valid YAML"),
        ("just text\n", "at 'compose': must be a YAML mapping, found str"),
        ("services:\n", "at 'compose.services': must be a non-empty mapping of services"),
        ("services: {}\n", "at 'compose.services': must be a non-empty mapping of services"),
        ("services: [web]\n", "at 'compose.services': must be a non-empty mapping of services"),
    ],
)
def test_compose_problems(compose: object, line: str) -> None:
    raw = good()
    raw["compose"] = compose
    assert problems("r1", raw) == [line]


PATH_LINE = "at 'manifest[0].path': must be a relative path of [A-Za-z0-9._-] segments without '..'"


@pytest.mark.parametrize(
    ("entry", "lines"),
    [
        ({"name": "A", "path": "p", "key": "k", "x": 1}, ["at 'manifest[0].x': unknown key"]),
        (
            {"name": "A", "path": "p", "key": "k", "use": 7},
            ["at 'manifest[0].use': unknown use 7 (only 'registry-auth')"],
        ),
        (
            {"name": "1A", "path": "p", "key": "k"},
            ["at 'manifest[0].name': '1A' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"],
        ),
        ({"path": "p", "key": "k"}, ["at 'manifest[0].name': must be a non-empty string"]),
        (
            {"name": "", "path": "p", "key": "k"},
            ["at 'manifest[0].name': must be a non-empty string"],
        ),
        ({"name": "A", "key": "k"}, [PATH_LINE]),
        ({"name": "A", "path": "", "key": "k"}, [PATH_LINE]),
        ({"name": "A", "path": "a/./b", "key": "k"}, [PATH_LINE]),
        ({"name": "A", "path": "a/../b", "key": "k"}, [PATH_LINE]),
        ({"name": "A", "path": "a//b", "key": "k"}, [PATH_LINE]),
        ({"name": "A", "path": "a/b/", "key": "k"}, [PATH_LINE]),
        ({"name": "A", "path": "a b", "key": "k"}, [PATH_LINE]),
        ({"name": "A", "path": 5, "key": "k"}, [PATH_LINE]),
        ({"name": "A", "path": "envs/e\n", "key": "k"}, [PATH_LINE]),  # `$` matches before \n
        (
            {"name": "A\n", "path": "p", "key": "k"},
            ["at 'manifest[0].name': 'A\\n' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"],
        ),
        ({"name": "A", "path": "p"}, ["at 'manifest[0].key': must be a non-empty string"]),
        (
            {"name": "A", "path": "p", "key": 1},
            ["at 'manifest[0].key': must be a non-empty string"],
        ),
    ],
)
def test_manifest_entry_problems(entry: dict[str, Any], lines: list[str]) -> None:
    raw = good()
    raw["manifest"] = [entry]
    assert problems("r1", raw) == lines


def test_a_non_mapping_entry_does_not_hide_the_entries_after_it() -> None:
    raw = good()
    raw["manifest"] = [["A"], {"name": "B", "path": "p", "key": ""}]
    assert problems("r1", raw) == [
        "at 'manifest[0]': must be a mapping with name, path and key",
        "at 'manifest[1].key': must be a non-empty string",
    ]


def test_duplicate_names_name_the_second_entry() -> None:
    raw = good()
    entry = {"name": "A", "path": "p", "key": "k"}
    raw["manifest"] = [dict(entry), {"name": "B", "path": "p", "key": "k"}, dict(entry)]
    assert problems("r1", raw) == ["at 'manifest[2].name': 'A' appears twice"]


def test_registry_entry_names_are_free_form_and_not_variables() -> None:
    raw = good()
    raw["manifest"] = [
        {
            "name": "robot account",
            "path": "envs/e/registry",
            "key": "robot",
            "use": "registry-auth",
        },
        {"name": "DB", "path": "envs/e/registry", "key": "robot2", "use": "registry-auth"},
        {"name": "DB", "path": "envs/e/app", "key": "db"},
    ]
    b = validate("r1", raw)
    assert b.manifest == (
        ManifestEntry("robot account", "envs/e/registry", "robot", "registry-auth"),
        ManifestEntry("DB", "envs/e/registry", "robot2", "registry-auth"),
        ManifestEntry("DB", "envs/e/app", "db", None),
    )
    assert [e.key for e in b.env_entries] == ["db"]
    assert [e.key for e in b.registry_entries] == ["robot", "robot2"]


def test_a_valid_bundle_carries_every_field() -> None:
    raw = good()
    raw["compose"] = (
        "services:\n  web: {image: harbor.example.net/a}\n  db: {image: Harbor.example.net/b}\n"
        "  1: {image: '${REG}/c'}\n  2: {build: .}\n"
    )
    assert validate("r.1-a_B", raw) == Bundle(
        revision="r.1-a_B",
        project="shop",
        compose=raw["compose"],
        env_template=raw["env_template"],
        manifest=(
            ManifestEntry("DB_PASSWORD", "envs/env-dev-08/app", "db_password"),
            ManifestEntry("registry", "envs/env-dev-08/registry", "robot", "registry-auth"),
        ),
        registry_host="harbor.example.net",
        disk_need_bytes=2147483648,
        services=("1", "2", "db", "web"),
    )


@pytest.mark.parametrize("need", [0, 1, 2**40])
def test_disk_need_bytes_zero_and_up_are_accepted(need: int) -> None:
    raw = good()
    raw["disk_need_bytes"] = need
    assert validate("r1", raw).disk_need_bytes == need


@pytest.mark.parametrize("need", [-1, 1.5, "10", False, [1]])
def test_disk_need_bytes_must_be_a_non_negative_integer(need: object) -> None:
    raw = good()
    raw["disk_need_bytes"] = need
    assert problems("r1", raw) == [
        "at 'disk_need_bytes': must be a non-negative integer number of bytes"
    ]


@pytest.mark.parametrize("host", ["", 5, ["h"], False])
def test_registry_host_must_be_a_non_empty_string(host: object) -> None:
    raw = good()
    raw["registry_host"] = host
    assert problems("r1", raw) == ["at 'registry_host': must be a non-empty string"]


def test_registry_host_null_means_none() -> None:
    raw = good()
    raw["registry_host"] = None
    assert validate("r1", raw).registry_host is None


@pytest.mark.parametrize(
    ("template", "line"),
    [
        ("A=\x00\n", "at 'env_template': must not contain NUL bytes"),
        ("# \x00 in a comment\n", "at 'env_template': must not contain NUL bytes"),
        (None, "at 'env_template': must be a string"),
        (b"A=1\n", "at 'env_template': must be a string"),
    ],
)
def test_env_template_must_be_text_without_nul(template: object, line: str) -> None:
    raw = good()
    raw["env_template"] = template
    assert problems("r1", raw) == [line]


# -- the name bounds (docker compose's project name; the revision becomes a directory) ------

LOWER = "abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.mark.parametrize("length", [1, 2, 62, 63])
def test_project_names_up_to_63_characters_are_accepted(length: int) -> None:
    raw = good()
    raw["project"] = ("p" + "a1_-" * 16)[:length]
    assert validate("r1", raw).project == raw["project"]


@pytest.mark.parametrize(
    "project", ["p" * 64, "", "-p", "_p", "Shop", "sh.op", "sh op", "shop\n", 7, None]
)
def test_project_names_compose_refuses_are_refused(project: object) -> None:
    raw = good()
    raw["project"] = project
    assert problems("r1", raw) == ["at 'project': must match ^[a-z0-9][a-z0-9_-]{0,62}$"]


@pytest.mark.parametrize("length", [1, 63, 64])
def test_revisions_up_to_64_characters_are_accepted(length: int) -> None:
    revision = ("R" + "a.1_-" * 13)[:length]
    assert validate(revision, good()).revision == revision


@pytest.mark.parametrize("revision", ["r" * 65, "", ".r", "-r", "_r", "r/1", "r 1", "r\n"])
def test_revisions_that_cannot_be_a_directory_name_are_refused(revision: str) -> None:
    assert problems(revision, good()) == [
        "at 'revision': must be 1-64 of A-Z a-z 0-9 . _ - starting with a letter or digit"
    ]


@given(
    st.text(alphabet=LOWER + "_-", min_size=0, max_size=70),
    st.sampled_from(LOWER),
)
def test_project_rule_over_generated_names(rest: str, first: str) -> None:
    raw = good()
    raw["project"] = first + rest
    if len(first + rest) <= 63:
        assert validate("r1", raw).project == first + rest
    else:
        assert problems("r1", raw) == ["at 'project': must match ^[a-z0-9][a-z0-9_-]{0,62}$"]


# -- refusals the integration tests hold end to end, word for word here (mutation testing runs
# only tests/unit/core) ---------------------------------------------------------------------

SURROGATE = "is not valid Unicode text (it holds a lone surrogate such as \\ud800)"


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda b: b.update(project="sh\ud800op"), "project"),
        (lambda b: b["manifest"][0].update(key="db\udfff"), "manifest[0].key"),
        (lambda b: b["manifest"][1].update({"n\ud800": 1}), "manifest[1] key"),
        (lambda b: b.update({"\ud801": 1}), "key '\\ud801'"),
    ],
)
def test_a_lone_surrogate_is_the_only_problem_named(mutate: Any, where: str) -> None:
    """Nothing else is read once a text cannot be encoded: one line, however much else is bad."""
    raw = good()
    raw["compose"] = ""  # would be a problem of its own, were it read
    mutate(raw)
    assert problems("r1", raw) == [f"at '{where}': {SURROGATE}"]


def test_a_lone_surrogate_in_the_revision_is_named_too() -> None:
    assert problems("r\ud800", good()) == [f"at 'revision': {SURROGATE}"]


@pytest.mark.parametrize("value", ["abort", "", 1, None, ["retry"]])
def test_on_failure_is_rollback_or_retry(value: object) -> None:
    raw = good()
    raw["on_failure"] = value
    assert problems("r1", raw) == ["at 'on_failure': must be 'rollback' or 'retry'"]


@pytest.mark.parametrize("value", ["rollback", "retry"])
def test_on_failure_is_carried(value: str) -> None:
    raw = good()
    raw["on_failure"] = value
    assert validate("r1", raw).on_failure == value
    raw.pop("on_failure")
    assert validate("r1", raw).on_failure == "rollback"


def test_an_image_from_another_registry_is_named_with_both_registries() -> None:
    raw = good()
    raw["compose"] = (
        "services:\n  web:\n    image: harbor.example.net/a:1\n"
        "  cache:\n    image: redis:7\n  db:\n    image: ghcr.io/x/db:2\n"
    )
    tail = (
        "(the only registry the agent holds a credential for; an image without a registry "
        "part comes from docker.io)"
    )
    assert problems("r1", raw) == [
        "at 'compose.services.cache.image': 'redis:7' comes from docker.io, not from the "
        f"bundle's registry_host harbor.example.net {tail}",
        "at 'compose.services.db.image': 'ghcr.io/x/db:2' comes from ghcr.io, not from the "
        f"bundle's registry_host harbor.example.net {tail}",
    ]


def test_images_are_not_checked_without_a_registry_host() -> None:
    raw = good()
    raw["compose"] = "services:\n  cache:\n    image: redis:7\n"
    raw["registry_host"] = None
    raw["manifest"] = raw["manifest"][:1]
    assert validate("r1", raw).services == ("cache",)


def test_a_relative_bind_is_refused_with_its_own_code_where_and_source() -> None:
    raw = good()
    raw["compose"] = (
        "services:\n  web:\n    image: harbor.example.net/a:1\n"
        "    volumes: ['./data:/data', '/srv/abs:/abs', 'named:/n']\n"
        "volumes:\n  named: {}\n"
    )
    with pytest.raises(DeployError) as info:
        validate("r7", raw)
    err = info.value
    assert (err.code, err.outcome) == ("BUNDLE_RELATIVE_BIND", "refused")
    assert err.message == (
        "the compose file of revision 'r7' bind-mounts a host path that is not absolute, "
        "nothing was changed: at 'compose.services.web.volumes[0]': './data'"
    )
    assert err.hint == (
        "a relative bind (./data) would live in the agent's revision directory, which is "
        "replaced on every apply and pruned: use a named volume or an absolute host path "
        "written out (/srv/app/data, not ${DATA}) (each line below says how to write it; "
        'OPERATIONS.md, "Writing a bundle")'
    )
    assert err.detail.splitlines() == [
        "services.web.volumes[0] ./data is not an absolute host path: it would live in the "
        "agent's revision directory, replaced on every apply and pruned (no allowance permits "
        "it; write instead: a named volume (`data:/data` with `volumes: {data: {}}`), or an "
        "absolute host path written out (/srv/app/data))"
    ]


def test_every_relative_bind_is_named_after_the_other_problems_are_gone() -> None:
    raw = good()
    raw["compose"] = (
        "services:\n  web:\n    image: harbor.example.net/a:1\n    volumes: ['./a:/a']\n"
        "  db:\n    image: harbor.example.net/b:1\n    volumes: ['b:/b', '../c:/c']\n"
    )
    raw["on_failure"] = "abort"
    assert problems("r1", raw) == ["at 'on_failure': must be 'rollback' or 'retry'"]
    raw.pop("on_failure")
    with pytest.raises(DeployError) as info:
        validate("r1", raw)
    assert info.value.message.endswith(
        "nothing was changed: at 'compose.services.web.volumes[0]': './a'; "
        "at 'compose.services.db.volumes[1]': '../c'"
    )


def test_an_unreadable_value_is_a_yaml_problem_of_the_compose_file() -> None:
    raw = good()
    raw["compose"] = "services:\n  web:\n    image: harbor.example.net/a:1\nd: 2024-02-30\n"
    assert problems("r1", raw) == [
        "at 'compose': is not valid YAML (a value cannot be read, such as an impossible date)"
    ]


TOO_COMPLEX_HINT = (
    "the bundle's compose file: at most 20000 YAML nodes and 64 levels with every alias "
    "(*name, <<: *name) expanded"
)


@pytest.mark.parametrize(
    ("depth", "why"),
    [
        # past libyaml's own limit (1000): its error is read as the same refusal
        (1100, "nests deeper than 64 levels"),
        (70, "nests deeper than 64 levels once its aliases are expanded"),
    ],
)
def test_a_compose_file_nested_too_deep_is_refused_whole(depth: int, why: str) -> None:
    raw = good()
    raw["compose"] = "services: {web: {image: harbor.example.net/a}}\nx: " + (
        "[" * depth + "]" * depth + "\n"
    )
    with pytest.raises(DeployError) as info:
        validate("r3", raw)
    err = info.value
    assert (err.code, err.outcome) == ("BUNDLE_COMPOSE_TOO_COMPLEX", "refused")
    assert err.message == (
        f"the compose file of revision 'r3' {why}; refused before anything was written"
    )
    assert err.hint == TOO_COMPLEX_HINT


def test_a_compose_file_that_expands_past_the_node_budget_is_refused_whole() -> None:
    levels = ["a: &a [" + ", ".join(["x"] * 10) + "]"]
    for prev, name in zip("abcde", "bcdef", strict=True):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    raw = good()
    raw["compose"] = "\n".join(levels) + "\nservices: {web: {image: harbor.example.net/a}}\n"
    with pytest.raises(DeployError) as info:
        validate("r3", raw)
    err = info.value
    assert err.code == "BUNDLE_COMPOSE_TOO_COMPLEX"
    assert err.message == (
        "the compose file of revision 'r3' expands to more than 20000 YAML nodes once its "
        "aliases (*name) are expanded, which docker compose would hold in memory; refused "
        "before anything was written"
    )
    assert err.hint == TOO_COMPLEX_HINT


# -- rollout (contract v1.2) ------------------------------------------------------------------


@pytest.mark.parametrize("spread", [0, 1, 600, 86400])
def test_a_rollout_spread_is_accepted(spread: int) -> None:
    validate("r42", {**good(), "rollout": {"spread_s": spread}})
    validate("r42", {**good(), "rollout": {}})  # no spread: at once


@pytest.mark.parametrize(
    ("rollout", "line"),
    [
        ({"spread_s": 86401}, "at 'rollout': spread_s must be 0 to 86400 seconds"),
        ({"spread_s": -1}, "at 'rollout': spread_s must be 0 to 86400 seconds"),
        ({"spread_s": 60.5}, "at 'rollout': spread_s must be an integer number of seconds"),
        ({"spread_s": True}, "at 'rollout': spread_s must be an integer number of seconds"),
        ({"spread_s": None}, "at 'rollout': spread_s must be an integer number of seconds"),
        ({"spread_s": 60, "canary": 1}, "at 'rollout': unknown key(s) 'canary' (only 'spread_s')"),
        (600, "at 'rollout': must be a mapping {spread_s: <seconds>}"),
    ],
)
def test_a_bad_rollout_is_refused_word_for_word(rollout: object, line: str) -> None:
    with pytest.raises(DeployError) as info:
        validate("r42", {**good(), "rollout": rollout})
    assert info.value.code == "BUNDLE_INVALID"
    assert line in info.value.message.splitlines()


@given(
    st.sampled_from(["/srv/media", "/", "./media", "media", "~/m", ""]),
    st.sampled_from(["${MEDIA}", "$MEDIA", "${MEDIA}/sub"]),
    st.booleans(),
)
def test_a_bind_led_by_a_variable_is_judged_after_the_env_is_applied(
    value: str, source: str, secret: bool
) -> None:
    """Issue 47: ``${MEDIA}:/media`` after ``MEDIA=/srv/media`` in the template is an absolute
    bind, as compose reads it; a relative value, a manifest variable (a secret the agent fills:
    unknown here) or no assignment stays BUNDLE_RELATIVE_BIND, saying how to set it."""
    import yaml

    raw = good()
    compose = yaml.safe_load(raw["compose"])
    compose["services"]["web"]["volumes"] = [f"{source}:/media"]
    raw["compose"] = yaml.safe_dump(compose)
    raw["env_template"] = f"MEDIA={value}\n" if not secret else "MEDIA=${MEDIA}\n"
    if secret:
        raw["manifest"] = [{"name": "MEDIA", "path": "envs/x/app", "key": "media"}]
    rest = source.removeprefix("${MEDIA}").removeprefix("$MEDIA")
    if (value + rest).startswith("/") and not secret:  # as compose reads it (`/sub` too)
        validate("r1", raw)
        return
    with pytest.raises(DeployError) as caught:
        validate("r1", raw)
    assert caught.value.code == "BUNDLE_RELATIVE_BIND"
    if not value.startswith("~") or secret:
        assert "the variable set in the env_template" in caught.value.detail


@pytest.mark.parametrize(
    ("bind", "starts"),
    [
        ("./:/app", "the app's code in its image: copy it in the Dockerfile (`COPY . /app`)"),
        (".:/usr/src/app", "the app's code in its image"),
        ("./src:/srv/x", "the app's code in its image"),
        ("./nginx.conf:/etc/nginx/nginx.conf:ro", "a config with the file's text"),
        ("./conf:/app.ini", "a config with the file's text"),
        (
            "./conf.d:/etc/nginx/conf.d",
            "for what the app writes there (a database, state), a named volume "
            "(`conf-d:/etc/nginx/conf.d`",
        ),
        ("./config:/config", "for what the app writes there"),
        ("./data:/var/lib/postgresql/data", "a named volume (`data:/var/lib/postgresql/data`"),
        ("./uploads:/uploads", "a named volume (`uploads:/uploads` with `volumes: {uploads: {}}`)"),
        ("./export:/usr/src/paperless/export", "a named volume (`export:"),
        ("./backend/src:/code/src:ro", "the app's code in its image"),
        ("./backend/package.json:/code/package.json", "the app's code in its image"),
    ],
)
def test_a_relative_bind_s_rewrite_follows_what_it_holds(bind: str, starts: str) -> None:
    """Issue 47: code is the image's (a named volume would keep the first image's code), one
    file a config, a folder of config files a config each, data a named volume."""
    source, target = bind.split(":")[:2]
    said = bind_rewrite(source, target)
    assert said.startswith(starts), said
    assert said.endswith(", or an absolute host path written out (/srv/app/data)")
    if "config" in said:
        assert "each `$` in it written `$$`" in said or "each `$` written `$$`" in said


@pytest.mark.parametrize(
    ("template", "source", "refused"),
    [
        ("", "${CONFIG_DIR:-/var/lib/plex}/config", False),  # unset: compose takes the default
        ("CONFIG_DIR=/srv/plex\n", "${CONFIG_DIR:-./x}/config", False),
        ("CONFIG_DIR=\n", "${CONFIG_DIR:-/srv/plex}", False),  # `:-`: empty takes it too
        ("CONFIG_DIR=\n", "${CONFIG_DIR-/srv/plex}", True),  # `-`: empty is empty
        ("", "${CONFIG_DIR:-./config}", True),
        ("CONFIG_DIR=${CONFIG_DIR}\n", "${CONFIG_DIR:-/srv/plex}", True),  # a secret: unknown
        ("", "${CONFIG_DIR}/config", True),  # set nowhere: named, not judged as empty
    ],
)
def test_a_variable_s_default_is_read_as_compose_reads_it(
    template: str, source: str, refused: bool
) -> None:
    import yaml

    raw = good()
    compose = yaml.safe_load(raw["compose"])
    compose["services"]["web"]["volumes"] = [f"{source}:/config"]
    raw["compose"] = yaml.safe_dump(compose)
    raw["env_template"] = template
    if "${CONFIG_DIR}" in template:
        raw["manifest"] = [{"name": "CONFIG_DIR", "path": "envs/x/app", "key": "dir"}]
    if not refused:
        validate("r1", raw)
        return
    with pytest.raises(DeployError) as caught:
        validate("r1", raw)
    assert caught.value.code == "BUNDLE_RELATIVE_BIND"
