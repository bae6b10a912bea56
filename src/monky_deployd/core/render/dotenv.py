"""Read a ``.env`` template the way Compose's dotenv parser (compose-go v2 ``dotenv``) reads it.

A port of that parser: the template is walked statement by statement, and every real assignment
(``NAME=value``, ``export NAME=value`` or Compose's ``NAME: value``) is returned with the span of
its value and the value decoded as Compose would decode it (unquoted, double- or single-quoted),
as literal text and the plain ``${NAME}`` references the agent substitutes. Comments, blank
lines, bare ``NAME`` lines and anything else are never variables (R13: the template's header
comment says "substitutes every ${VAR}"). A template Compose itself could not read is refused
with ``ENV_TEMPLATE_INVALID``.

``core.render.envfile`` renders from what this returns; the rules are in docs/envfile.md.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import chain
from operator import itemgetter
from typing import NamedTuple

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import EnvError

# Go's unicode.IsSpace (what Compose trims at the end of an unquoted value and skips between
# statements) and the parser's own isSpace (no newline; skipped around keys and after `=`).
_GO_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_LINE_SPACE = frozenset("\t\v\f\r \x85\xa0")
_EXPORT = re.compile(r"export[\t\n\f\r ]+")
_KEY_PUNCTUATION = frozenset("_.-[]")
# Runs of the sets above as patterns, so a template is read in C, not a character at a time
# (what keeps the walk linear and fast: a template at max_bundle_bytes renders in well under a
# second; bench/envfile_render.py). A key's non-ASCII characters take the slow check.
_GO_SPACE_RUN = re.compile("[" + re.escape("".join(sorted(_GO_SPACE))) + "]*")
_LINE_SPACE_RUN = re.compile("[" + re.escape("".join(sorted(_LINE_SPACE))) + "]*")
_ASCII_KEY_RUN = re.compile(r"[A-Za-z0-9_.\-\[\]\t\v\f\r \x85\xa0]*")
_QUOTED_BODY = {
    q: re.compile(r"[^\\" + q + r"]*(?:\\.[^\\" + q + r"]*)*", re.DOTALL) for q in "\"'"
}  # up to the closing quote; a backslash takes the next character (the quote too) with it
# (written as runs between escapes: an alternation tried at every character took ~1 s on 4 MiB)
_BACKSLASHED = re.compile(r"\\(.)", re.DOTALL)
# The common statement, read in one match (the general walk gives the same assignment): an ASCII
# name, `=` and an unquoted value of plain characters and `${NAME}` references, single spaces
# between words (never before a `#`, never at either end), up to a newline or the end.
_PLAIN_CHAR = r"[A-Za-z0-9_./:@,+%=~^*!?&|<>;()\[\]{}-]"
_PLAIN_WORD = rf"(?:{_PLAIN_CHAR}|\$\{{[A-Za-z_][A-Za-z0-9_]*\}})+"
_SIMPLE_STATEMENT = re.compile(
    rf"([A-Za-z_][A-Za-z0-9_.-]*)=((?:{_PLAIN_WORD}(?: {_PLAIN_WORD})*)?)(?=\n|\Z)"
)
# The same statement after the white space the walk skips first: a run of such lines is read
# back to back, one match each.
_SIMPLE_LINES = re.compile(_GO_SPACE_RUN.pattern + _SIMPLE_STATEMENT.pattern)
# compose-go's template pattern: $$ | $name | ${name[:?][-+?]rest} | ${ (invalid). Compose's
# `rest` is a greedy `.*\}` (to the last `}` of the line); matching it here would rescan the line
# for every default (quadratic in a long line), so the pattern stops after the modifier and
# ``_substitutions`` finds the line's last `}` once.
_SUBST = re.compile(
    r"\$(?:(?P<escaped>\$)|(?P<named>[_a-zA-Z][_a-zA-Z0-9]*)"
    r"|\{(?:(?P<braced>[_a-zA-Z][_a-zA-Z0-9]*)(?:(?P<modifier>:?[-+?])|\})|(?P<invalid>)))"
)
PLAIN_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# compose-go's expandEscapes: the escapes it decodes inside double quotes.
_ESCAPE = re.compile(r"\\(?:[abcfnrtv$\"\\]|0[0-9]{0,3})")
_ESCAPE_SPLIT = re.compile(f"({_ESCAPE.pattern})")  # text, escape, text, ...
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
}


# A piece of an assignment's value: ``(text, False)`` literal text in Compose's pre-interpolation
# form (``$$`` still meaning ``$``), or ``(name, True)`` a reference the agent substitutes. A
# plain tuple: one is built for every piece of every value, so it must be cheap.
Part = tuple[str, bool]


class Assignment(NamedTuple):
    name: str
    start: int  # span of the value in the template (quotes included)
    end: int
    # None for a simple line (``_SIMPLE_LINES``): its parts are ``_plain(template[start:end])``,
    # built only when it is written; a 4 MiB template holds 200,000 of them (``parts_of``)
    parts: tuple[Part, ...] | None
    refs: tuple[str, ...]  # the names of the parts' references, in order

    def parts_of(self, template: str) -> tuple[Part, ...]:
        return _plain(template[self.start : self.end]) if self.parts is None else self.parts


def _assignment(name: str, start: int, end: int, parts: tuple[Part, ...]) -> Assignment:
    return Assignment(name, start, end, parts, tuple(text for text, ref in parts if ref))


_REFS = itemgetter(4)


def variables(assignments: list[Assignment]) -> set[str]:
    """Every variable the assignments reference (over the distinct lists of names: in C)."""
    return set(chain.from_iterable(set(map(_REFS, assignments))))


def _invalid(template: str, pos: int, what: str) -> EnvError:
    line = template.count("\n", 0, pos) + 1
    return EnvError(
        f"the .env template cannot be read by docker compose: line {line} {what}",
        code=Code.ENV_TEMPLATE_INVALID,
        hint="the bundle's env_template: each line must be a comment, blank, NAME=value "
        "(values with spaces or # quoted), or a bare NAME",
    )


def parse(template: str) -> list[Assignment]:
    """Walk the template as Compose's dotenv parser does; return every assignment."""
    src = template
    n = len(src)
    i = 1 if src.startswith("\ufeff") else 0
    found: list[Assignment] = []
    append = found.append
    new = tuple.__new__  # an Assignment without its Python-level __new__: one per line
    same_refs: dict[tuple[str, ...], tuple[str, ...]] = {}
    while True:
        # a run of simple `NAME=value` lines (the common template), one C match each: what the
        # walk below would find for each of them
        while (fast := _SIMPLE_LINES.match(src, i)) is not None:
            name, value = fast.groups()
            start = fast.start(2)
            if "$" in value:
                refs = tuple(PLAIN_REF.findall(value))
                refs = same_refs.setdefault(refs, refs)  # one tuple per distinct list of names
            else:
                refs = ()  # never rewritten: its parts are never asked for
            append(new(Assignment, (name, start, start + len(value), None, refs)))
            i = fast.end()
        i = _GO_SPACE_RUN.match(src, i).end()  # type: ignore[union-attr]  # `*` always matches
        if i >= n:
            return found
        if src[i] == "#":
            nl = src.find("\n", i)
            if nl < 0:
                return found
            i = nl
            continue
        stmt = i
        if _EXPORT.match(src, i):
            i = _LINE_SPACE_RUN.match(src, i + len("export")).end()  # type: ignore[union-attr]
            if i >= n:  # compose: "zero length string"
                raise _invalid(src, stmt, "has `export` without a variable name")
        key_start = i
        sep = ""
        while i < n:
            i = _ASCII_KEY_RUN.match(src, i).end()  # type: ignore[union-attr]
            if i >= n:
                break
            ch = src[i]
            if ch in "=:\n":
                sep = ch
                break
            if ch in _LINE_SPACE or ch in _KEY_PUNCTUATION or _is_letter_or_number(ch):
                i += 1
                continue
            raise _invalid(src, i, f"has {ch!r} where a variable name was expected")
        key = src[key_start:i].rstrip("".join(_GO_SPACE))
        if " " in key:
            raise _invalid(src, stmt, "has a variable name containing a space")
        if not sep:  # text without `=` at the end of the file: not an assignment
            return found
        i += 1
        if sep == "\n":  # a bare NAME: Compose copies it from its own environment
            continue
        i = _LINE_SPACE_RUN.match(src, i).end()  # type: ignore[union-attr]
        value_start = i
        if i < n and src[i] in "\"'":
            end, parts = _read_quoted(src, i)
            i = end
        else:
            nl = src.find("\n", i)
            line_end = n if nl < 0 else nl
            raw = src[i:line_end].split(" #", 1)[0].rstrip("".join(_GO_SPACE))
            end = i + len(raw)
            parts = _substitutions(src, i, raw)
            i = line_end
        found.append(_assignment(key, value_start, end, parts))


def _read_quoted(src: str, start: int) -> tuple[int, tuple[Part, ...]]:
    """Decode the quoted value at ``start``; return (index after the closing quote, parts)."""
    quote = src[start]
    body = _QUOTED_BODY[quote].match(src, start + 1).end()  # type: ignore[union-attr]
    if body >= len(src) or src[body] != quote:  # no closing quote (a lone `\` at the end)
        raise _invalid(src, start, "has a quoted value without its closing quote")
    # A backslash is kept with the character it escapes, except before the quote itself.
    text = src[start + 1 : body]
    if "\\" + quote in text:  # without one, nothing changes
        text = _BACKSLASHED.sub(lambda m: quote if m.group(1) == quote else m.group(0), text)
    if quote == '"':
        return body + 1, _substitutions(src, start, _expand_escapes(text))
    return body + 1, _single_quoted_parts(text)


def _expand_escapes(text: str) -> str:
    """compose-go's expandEscapes: decode escapes, keeping ``$`` in pre-interpolation form."""
    if "\\" not in text:
        return text
    pieces = _ESCAPE_SPLIT.split(text)
    pieces[1::2] = [_decode_escape(seq) for seq in pieces[1::2]]
    return "".join(pieces)


def _decode_escape(seq: str) -> str:
    if seq == "\\$":
        return "$$"
    if seq.startswith("\\0"):
        digits = seq[2:]
        # Go rewrites `\0ddd` to `\ddd`, which decodes only as three octal digits <= 255;
        # otherwise the rewritten `\ddd` is kept (so `\0` alone becomes a lone backslash).
        if len(digits) == 3 and all(c in "01234567" for c in digits):
            code = int(digits, 8)
            if code <= 255:
                return chr(code)
        return "\\" + digits
    return _SIMPLE_ESCAPES[seq[1]]


def _plain(text: str) -> tuple[Part, ...]:
    """The parts of a value whose only `$` are plain ``${NAME}`` references."""
    if "$" not in text:
        return ((text, False),) if text else ()
    return tuple((p, k % 2 == 1) for k, p in enumerate(PLAIN_REF.split(text)) if p)


def _substitutions(src: str, pos: int, text: str) -> tuple[Part, ...]:
    """Split an interpolated value into literal text and the agent's ``${NAME}`` references.

    Tokenizes like compose-go's ``template.Substitute``: ``$$``, ``$NAME`` and
    ``${NAME:-default}`` (up to its first balanced ``}``) are Compose's own and stay literal;
    ``$NAME`` is kept as ``${NAME}`` (same meaning) so a secret put right after it cannot extend
    the name, except on the rest of a line after a default that leaves a ``{`` open: compose's
    greedy match would take the added ``}`` into that default (nothing there can be the agent's).
    """
    if "$" not in text:
        return ((text, False),) if text else ()
    pieces = PLAIN_REF.split(text)  # literal, name, literal, ...: the common case, done in C
    if all("$" not in p for p in pieces[::2]):
        return tuple((p, k % 2 == 1) for k, p in enumerate(pieces) if p)
    parts: list[Part] = []
    literal: list[str] = []
    last = 0
    i = 0
    open_default_until = -1  # end of the line a `${NAME:-{...` without its `}` runs to
    line_end, last_brace = -1, -1  # the current line's end and its last `}` (found once a line)
    while (j := text.find("$", i)) >= 0:
        m = _SUBST.match(text, j)
        if m is None:  # a `$` Compose leaves alone
            i = j + 1
            continue
        if m.group("invalid") is not None:
            raise _invalid(src, pos, "has a `${` that is not a valid ${NAME} reference")
        if m.group("named") is not None:
            if j >= open_default_until:
                literal.append(text[last:j] + "${" + m.group("named") + "}")
                last = m.end()
            i = m.end()
            continue
        name = m.group("braced")
        if name is None:  # `$$`
            i = m.end()
            continue
        if m.group("modifier") is not None:  # ${NAME:-...}: the rest after its `}` is scanned on
            if j >= line_end:
                nl = text.find("\n", j)
                line_end = len(text) if nl < 0 else nl
                last_brace = text.rfind("}", j, line_end)
            if last_brace < m.end():  # compose's `.*\}` finds no `}` on the rest of the line
                raise _invalid(src, pos, "has a `${` that is not a valid ${NAME} reference")
            closing = _first_brace_closing(text, j, last_brace + 1)
            if closing < 0:
                open_default_until = line_end
                closing = last_brace
            i = closing + 1
            continue
        literal.append(text[last:j])
        if "".join(literal):
            parts.append(("".join(literal), False))
        literal = []
        parts.append((name, True))
        last = i = m.end()
    literal.append(text[last:])
    if "".join(literal):
        parts.append(("".join(literal), False))
    return tuple(parts)


def _first_brace_closing(text: str, start: int, stop: int) -> int:
    """compose-go's getFirstBraceClosingIndex over ``text[start:stop]`` (the character after each
    `{` is skipped): the index in ``text`` of the `}` that balances the braces; -1 when none."""
    depth = 0
    i = start
    while i < stop:
        ch = text[i]
        if ch == "}":
            depth -= 1
            if depth == 0:
                return i
        elif ch == "{":
            depth += 1
            i += 1
        i += 1
    return -1


def _single_quoted_parts(text: str) -> tuple[Part, ...]:
    """Single quotes are literal for Compose; the agent still substitutes ``${NAME}``."""
    parts: list[Part] = []
    last = 0
    for m in PLAIN_REF.finditer(text):
        if m.start() > last:
            parts.append((text[last : m.start()].replace("$", "$$"), False))
        parts.append((m.group(1), True))
        last = m.end()
    if last < len(text):
        parts.append((text[last:].replace("$", "$$"), False))
    return tuple(parts)


def _is_letter_or_number(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LN"
