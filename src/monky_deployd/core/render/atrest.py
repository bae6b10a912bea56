"""The secrets of a revision's ``.env`` at rest, read back as Compose reads them. Pure.

A restore, a rollback or the previous project's ``down`` runs a revision whose KV values this
tick did not read: what compose may echo then is what its ``.env`` holds. That file is what
``core.render.envfile`` rendered (every assignment holding a secret on one double-quoted line, the
rest of the template as written), so it is read with the agent's own reader of Compose's dotenv
format (``core.render.dotenv``): each assignment's value comes back exactly as Compose decodes it,
whatever follows it on its line (`` # note``) and whatever it holds (a Unicode line separator,
``\\v``, ``\\x85``: Compose splits lines only at ``\\n``). The renderer writes every assignment
it put a secret in double-quoted and keeps the rest of the template as the author wrote it, so
only double-quoted values can hold a secret: an unquoted or single-quoted value is the author's
text and is not learned (a template of 300,000 plain lines would otherwise make a masker of
300,000 "secrets": about 50 s and a gigabyte, extrapolated from 20,000: 2.8 s, 68 MB). The agent
cannot tell which characters of a double-quoted value came from OpenBao, so each counts whole (a
value that is a secret alone is that secret exactly; a secret with the author's text around it
is inside a value, so every run of 8 of its characters is masked).

A file Compose itself could not read (not one the agent wrote) is read line by line instead, at
``\\n`` only: each line, and what follows its first ``=`` or ``:``, counts whole.
"""

from __future__ import annotations

import re

from monky_deployd.core.faults import EnvError
from monky_deployd.core.render.dotenv import parse


def secrets_in_env_file(text: str) -> tuple[str, ...]:
    """Every double-quoted assignment value of a ``.env``: as Compose decodes it, and as
    written."""
    try:
        assignments = parse(text)
    except EnvError:
        return _lines(text)
    found: list[str] = []
    for a in assignments:
        if not text.startswith('"', a.start):  # the author's own text: never a secret
            continue
        written = text[a.start : a.end]
        parts = a.parts_of(text)
        literal = "".join(part if not ref else "${" + part + "}" for part, ref in parts)
        decoded = literal.replace("$$", "$")  # Compose's interpolation of the value
        found.append(decoded)
        if written != decoded:
            found.append(written)
    return tuple(found)


def _lines(text: str) -> tuple[str, ...]:
    found: list[str] = []
    for line in text.split("\n"):
        found.append(line)
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        value = line[cut + 1 :].strip() if cut >= 0 else ""
        found.append(value)
        if value[:1] in ("'", '"') and value.rfind(value[0]) > 0:
            inner = value[1 : value.rfind(value[0])]
            found.append(inner)
            if value[0] == '"':
                found.append(_unescape_double(inner).replace("$$", "$"))
    return tuple(found)


def _unescape_double(text: str) -> str:
    table = {"\\\\": "\\", '\\"': '"', "\\n": "\n", "\\r": "\r"}
    return re.sub(r"\\[\\\"nr]", lambda m: table[m.group(0)], text)
