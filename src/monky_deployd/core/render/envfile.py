"""Render the bundle's ``.env`` template with secret values, byte-exact for Compose.

The template is the author's own ``.env`` file. The agent reads it the way Compose's dotenv
parser (compose-go v2 ``dotenv``) reads it, statement by statement (``core.render.dotenv``), and
substitutes every plain ``${NAME}`` that sits inside the value of a real assignment
(``NAME=value``, ``export NAME=value`` or Compose's ``NAME: value``). Comments, blank lines, bare
``NAME`` lines and anything else are never variables (R13: the template's header comment says
"substitutes every ${VAR}").

Only assignments that contain a substitution are rewritten: their value is decoded as Compose
would decode it (unquoted, double- or single-quoted), the secrets are put in, and the whole value
is written back double-quoted, escaped so Compose hands it on unchanged both through
``env_file: .env`` and through ``${VAR}`` interpolation of the compose file::

    \\ -> \\\\    " -> \\"    newline -> \\n    carriage return -> \\r    $ -> $$ (secrets only)

Every other byte of the template is kept as written. The rules, and what was measured with a real
container, are in docs/envfile.md.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from operator import itemgetter

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import EnvError
from monky_deployd.core.render.dotenv import PLAIN_REF, Assignment, Part, parse, variables

# Linux refuses exec() when one environment string ("NAME=value" plus its NUL) is longer than
# MAX_ARG_STRLEN (32 pages of 4 KiB); the container then fails with "argument list too long".
MAX_ENV_STRING_BYTES = 131072

# Names whose `${NAME}` Compose resolves from its own process environment before `.env`: the
# agent's child environment for docker (``adapters.box.runner.base_env`` plus DOCKER_CONFIG /
# DOCKER_HOST; a test holds the two together).
CHILD_ENV_NAMES = ("PATH", "LANG", "DOCKER_CONFIG", "DOCKER_HOST")
RESERVED_NAMES = frozenset(CHILD_ENV_NAMES)
# The prefixes of every variable docker compose and the docker CLI read as their own settings
# (``COMPOSE_DISABLE_ENV_FILE``, ``COMPOSE_PROFILES``, ``DOCKER_CONTEXT``, ``BUILDX_BUILDER``, ...:
# tests/integration/box/test_compose_settings.py reads them out of the installed compose binary).
# Compose runs from the model the policy judged with an environment the agent sets whole, so
# such a line could not act; a release that tries is refused all the same (ENV_COMPOSE_SETTING).
COMPOSE_SETTING_PREFIXES = ("COMPOSE_", "DOCKER_", "BUILDKIT_", "BUILDX_")

_NAME = itemgetter(0)  # Assignment.name


def template_variables(template: str) -> set[str]:
    """The ``${NAME}`` variables the template's assignments use (comments never count).

    Raises ``EnvError`` ``ENV_TEMPLATE_INVALID`` when Compose itself could not read the template.
    """
    return variables(parse(template))


def render(template: str, values: Mapping[str, str]) -> str:
    """The template with every ``${NAME}`` of its assignments replaced by ``values[NAME]``.

    Refuses (``EnvError``, outcome ``refused``) with ``ENV_TEMPLATE_INVALID``,
    ``ENV_NAME_RESERVED``, ``ENV_COMPOSE_SETTING``, ``ENV_INCOMPLETE`` (naming every unresolved
    variable) or ``ENV_VALUE_UNCARRIABLE``; messages name variables, never values.
    """
    with _no_cycle_collection():
        return _render(template, values)


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector while a template is read and written: that makes no
    cycles, but a 4 MiB template makes a million small tuples, and the collector's passes over
    them were a third of the render's time (bench/envfile_render.py). The previous state is
    restored; the memory is the same either way."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _render(template: str, values: Mapping[str, str]) -> str:
    assignments = parse(template)
    _check_reserved(assignments)
    _check_compose_settings(assignments)
    wanted = variables(assignments)
    own = _own_references(assignments, values)
    missing = _unresolved(assignments, values)
    if missing:
        raise EnvError(
            f"the .env template uses {len(missing)} variable(s) that have no value: "
            f"{', '.join(missing)} (neither a manifest entry nor assigned on an earlier line of "
            "the template)",
            code=Code.ENV_INCOMPLETE,
            hint="the bundle's manifest needs an entry (without `use`) for each variable named, "
            "and each entry's OpenBao KV path and key must exist; or assign it above the line "
            "that uses it (docs/envfile.md)",
        )
    kept = {name: "${" + name + "}" for name in own}  # compose resolves them when it reads .env
    _check_carriable(template, assignments, {**kept, **values})
    dollars = {name: values[name].replace("$", "$$") for name in wanted - own} | kept
    out: list[str] = []
    pos = 0
    for a in assignments:
        if not a.refs:
            continue
        out.append(template[pos : a.start])
        if a.parts is None:  # a simple line: literal, name, literal, ... with each secret put in
            pieces = PLAIN_REF.split(template[a.start : a.end])
            pieces[1::2] = [dollars[name] for name in pieces[1::2]]
            out.append('"' + _escape_double("".join(pieces)) + '"')
        else:
            out.append(_quote(a.parts, dollars))
        pos = a.end
    out.append(template[pos:])
    return "".join(out)


def unresolved(template: str, values: Mapping[str, str]) -> list[str]:
    """The variables of ``template`` that have no value: neither in ``values`` nor the
    template's own (what ``render`` refuses with ENV_INCOMPLETE), sorted."""
    return _unresolved(parse(template), values)


def _unresolved(assignments: list[Assignment], values: Mapping[str, str]) -> list[str]:
    own = _own_references(assignments, values)
    return sorted(variables(assignments) - values.keys() - own)


def _own_references(assignments: list[Assignment], values: Mapping[str, str]) -> set[str]:
    """The ``${NAME}`` references that are the template's own, as compose reads a ``.env``:
    NAME is no manifest variable (``values``) and an earlier line assigns it (compose resolves
    it from that line when it reads the file; the agent leaves it as written)."""
    assigned: set[str] = set()
    own: set[str] = set()
    pending: set[str] = set()
    for a in assignments:
        for name in a.refs:
            if name in values:
                continue
            (own if name in assigned else pending).add(name)
        assigned.add(a.name)
    return own - pending


# -- refusals ---------------------------------------------------------------------------------


def _check_reserved(assignments: list[Assignment]) -> None:
    clash = sorted(RESERVED_NAMES.intersection(map(_NAME, assignments)))
    if clash:
        raise EnvError(
            f"the .env template assigns {', '.join(clash)}, which docker compose takes from the "
            "agent's own environment instead of .env when interpolating the compose file, so the "
            "value would not reach the container the same way through both paths",
            code=Code.ENV_NAME_RESERVED,
            hint="rename the variable in the bundle's env_template; reserved: "
            + ", ".join(sorted(RESERVED_NAMES)),
        )


def compose_settings(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that docker compose or the docker CLI read as their own
    settings (``COMPOSE_SETTING_PREFIXES``), sorted."""
    return sorted({n for n in names if n.startswith(COMPOSE_SETTING_PREFIXES)})


def _check_compose_settings(assignments: list[Assignment]) -> None:
    found = compose_settings(map(_NAME, assignments))
    if found:
        raise EnvError(
            f"the .env template assigns {', '.join(found)}, named like the settings docker "
            "compose and the docker CLI read (the rule is the prefix: "
            + ", ".join(f"{p}*" for p in COMPOSE_SETTING_PREFIXES)
            + "): a release may not set how compose reads and runs it (compose runs the model "
            "this box's policy judged, never the release's .env)",
            code=Code.ENV_COMPOSE_SETTING,
            hint="rename the variable in the bundle's env_template and each `${NAME}` of it in "
            "the compose file; names starting "
            + ", ".join(COMPOSE_SETTING_PREFIXES)
            + " are compose's and the docker CLI's",
        )


def _check_carriable(
    template: str, assignments: list[Assignment], values: Mapping[str, str]
) -> None:
    faults: dict[str, str] = {}
    for name in sorted(variables(assignments)):
        value = values[name]
        if "\0" in value:
            faults[name] = "contains a NUL character, which no process environment can hold"
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            faults[name] = "is not valid Unicode text (a lone surrogate), so it has no UTF-8 bytes"
    encoded = {n: len(values[n].encode("utf-8", "surrogatepass")) for n in values}
    for a in assignments:
        if not a.refs or any(n in faults for n in a.refs):
            continue
        # A cheap bound first: a value's literal text has at most twice the characters of its
        # span in the template (`$` doubled, `$N` braced), each at most 4 bytes in UTF-8.
        bound = 4 * len(a.name) + 2 + 8 * (a.end - a.start) + sum(map(encoded.__getitem__, a.refs))
        if bound <= MAX_ENV_STRING_BYTES:
            continue
        parts = a.parts_of(template)
        literal = "".join([text for text, ref in parts if not ref])
        size = (
            len(a.name.encode())
            + 2  # "=" and the terminating NUL
            + len(literal.encode("utf-8", "surrogatepass"))
            + sum([encoded[text] for text, ref in parts if ref])
        )
        if size > MAX_ENV_STRING_BYTES:
            faults[a.name] = (
                f"would make an environment string of about {size} bytes; Linux starts no "
                f"process with one longer than {MAX_ENV_STRING_BYTES} bytes"
            )
    if faults:
        names = sorted(faults)
        raise EnvError(
            f"the .env file cannot carry {', '.join(names)}: "
            + "; ".join(f"{n} {faults[n]}" for n in names),
            code=Code.ENV_VALUE_UNCARRIABLE,
            hint="the secret's value in OpenBao (store it encoded, e.g. base64, if it must hold "
            "such data)",
        )


# -- writing ----------------------------------------------------------------------------------


def _quote(parts: tuple[Part, ...], dollars: Mapping[str, str]) -> str:
    """A double-quoted .env value that Compose decodes to exactly ``parts`` with secrets in
    (``dollars``: each secret with its ``$`` already doubled)."""
    text = "".join([dollars[t] if ref else t for t, ref in parts])
    return '"' + _escape_double(text) + '"'


def _escape_double(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
