"""Shared strategies and the one assertion of the fuzz suite: a refusal is a DeployError with a
catalogued code that is not INTERNAL (a bug), and its first line reads as text."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from monky_deployd.core.errors import CATALOGUE, Code
from monky_deployd.core.faults import DeployError

settings.register_profile(
    "fuzz-ci",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "fuzz-deep",
    max_examples=20_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "fuzz-quick",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# MONKY_FUZZ: deep (locally, many examples), quick (scripts/test-fast.sh), unset (CI: fuzz-ci)
FUZZ = settings.get_profile(f"fuzz-{os.environ.get('MONKY_FUZZ') or 'ci'}")


def assert_named(err: BaseException) -> None:
    """``err`` is a named refusal: any other exception type fails the test with its traceback."""
    if not isinstance(err, DeployError):
        raise err
    assert err.code in CATALOGUE and err.code is not Code.INTERNAL, err.code
    assert err.message and str(err).startswith(f"{err.code}: ")


# Text that includes what JSON can carry and a UTF-8 file cannot: lone surrogates, NUL.
any_text = st.text(st.characters(exclude_categories=()), max_size=40)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | any_text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)


def nested(depth: int, opener: str = "[", closer: str = "]", core: str = "0") -> str:
    return opener * depth + core + closer * depth


# Pieces of YAML that have broken loaders: anchors, aliases and merges, explicit tags, impossible
# dates, complex keys, directives, tabs, flow nesting, NUL and surrogate escapes.
YAML_PIECES = [
    "services:\n", "  web:\n", "    image: reg.example.net/a:1\n", "    image: busybox\n",
    "    volumes:\n", "      - ./d:/d\n", "      - data:/d\n", "      - /srv/x:/x\n",
    "      - {type: bind, source: ../x, target: /x}\n", "x-a: &a [1, 2, 3]\n", "x-b: *a\n",
    "  <<: *a\n", "x: !!binary aGVsbG8=\n", "x: !!timestamp 2024-02-30\n", "d: 2001-13-45\n",
    "t: 2024-02-29T25:61:00Z\n", "? [a, b]\n: c\n", "%YAML 1.1\n---\n", "---\n", "...\n",
    "\t- tab\n", "x: [[[[[[\n", "x: }\n", "x: !!python/object:os.system ls\n", 'x: "\\0"\n',
    'x: "\\ud800"\n', "x: &r [*r]\n", "x: !!int 0x_\n", "x: !!float 1e99999\n",
    "x: !!timestamp 12\n", "x: !!timestamp\n", "x: !!float\n", "x: !!bool maybe\n",
    "x: 0o777777777777777777777777777\n", "&a a: &b b\n", "*a : x\n", "- [a, *a]\n", "{a: 1}\n",
    "services: {}\n", "services:\n  1: {image: 'reg.example.net/${X}'}\n", "'\n", '"\n',
]  # fmt: skip
yaml_docs = st.lists(st.sampled_from(YAML_PIECES) | any_text, max_size=12).map("".join)


def alias_bomb(width: int, levels: int) -> str:
    lines = [f"x0: &x0 [{', '.join(['o'] * width)}]"]
    lines += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nservices:\n  web:\n    image: a/b\n    x-z: *x{levels - 1}\n"


hostile_yaml = (
    yaml_docs
    | st.builds(alias_bomb, st.integers(2, 40), st.integers(2, 12))
    | st.builds(
        lambda d, flow: (
            f"x: {nested(d)}\n" if flow else "".join(f"{' ' * i}k:\n" for i in range(min(d, 1500)))
        ),
        st.integers(1, 5000),
        st.booleans(),
    )
)


def dumps(value: Any) -> str:
    return json.dumps(value)
