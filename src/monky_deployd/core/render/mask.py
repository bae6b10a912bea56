"""The one masking step: every secret of a tick, in every form the tools print it. Pure.

A ``Masker`` is built from the tick's secrets (KV values, the registry credential, the held
token, the grant, and on a restore or a ``down`` the values of the revision's ``.env``). Every
child's output, every service error body, every exception text, the report and every log line
pass through it (``runner``, ``compose``, ``pullerrors``, ``tenancy``, ``bao``, ``agent.logs``).

What is masked (each masked stretch becomes ``***``):

- a secret of ``MIN_RUN`` (8) characters or more: **any run of 8 or more consecutive characters**
  of the secret in any of its printed forms (``forms``): raw, each of its lines, Go ``%q`` and
  ``%+q``, JSON (Python's and Go's, which also escapes ``<>&``), Python ``repr``, shell single
  quotes and backslashes, the agent's ``.env`` double quotes, Compose's ``$$``, URL encoding,
  and a secret of digits (a sign, leading zeros) as the number a tool reads it as (``0042`` ->
  ``42``, a port compose reads and warns about).
  So a cut echo (``parsing "CANARYzq7``), a line of a PEM key, or a value quoted by compose is
  masked as surely as the whole value. Runs of 7 or fewer characters of a long secret stay.
- a secret of ``MIN_SECRET`` (3) to 7 characters: its **exact** occurrences only, in every form.
  That is all a short secret can get: a cut echo of it is not recognised, and every unrelated
  occurrence of the same letters (a word, a number) is masked too, which also shows a reader
  where the secret would have been. A short secret is a weak secret; use long ones.
- a secret of 1 or 2 characters is not masked: masking it would blank ordinary text everywhere
  and still give it away.

The scan is linear in the text: the 8-character windows of every long form sit in a set; the
text, in chunks of 2 KiB, has its 5-character grams at every 4th position checked against the
windows' grams (any 8-character match holds one of them) at C speed (``map``/``set``); only in
a chunk with a hit are the probes walked one by one, and the windows around a hit looked up.
``bench/mask.py`` measures it. Masking is idempotent (``m(m(t)) == m(t)``) and leaves text that
shares no such run with a secret unchanged.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

MIN_RUN = 8  # any run of this many characters of a long secret is masked
MIN_SECRET = 3  # shorter secrets are not masked at all
MARK = "***"

_GRAM = 5  # probe gram length; an 8-window holds 4 of them, so a probe every 4th position
_STRIDE = MIN_RUN - _GRAM + 1
_CHUNK = 2048  # the text is scanned in chunks: only a chunk whose probes hit is looked at whole

_GO_SIMPLE = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_GO_SIMPLE |= {"\v": "\\v", "\\": "\\\\", '"': '\\"'}
_SHELL_SPECIAL = frozenset(" \t\n!\"#$&'()*;<>?[\\]^`{|}~")
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")  # what Go's Atoi reads (int64): no 5000-digit int()


def _go_char(c: str, ascii_only: bool) -> str:
    """One character as Go's strconv.Quote (``%q``) or QuoteToASCII (``%+q``) prints it."""
    if c in _GO_SIMPLE:
        return _GO_SIMPLE[c]
    o = ord(c)
    if o < 0x20 or o == 0x7F:
        return f"\\x{o:02x}"
    if o < 0x80 or (c.isprintable() and not ascii_only):
        return c
    return f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"


def _json_char(c: str, ascii_only: bool, html: bool) -> str:
    if html and c in "<>&":
        return f"\\u{ord(c):04x}"
    if html and c in "\u2028\u2029":
        return f"\\u{ord(c):04x}"
    return json.dumps(c, ensure_ascii=ascii_only)[1:-1]


def _repr_char(c: str) -> str:
    return repr(c)[1:-1] if c not in "'\"" else c


def _url_char(c: str) -> str:
    """Percent-encoding (``urllib.parse.quote(safe="")``, Go's ``url.QueryEscape`` but ``+``)."""
    if c.isascii() and (c.isalnum() or c in "_.-~"):
        return c
    return "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))


def _shell_single(s: str) -> Iterable[str]:
    yield s.replace("'", "'\"'\"'")
    yield s.replace("'", "'\\''")


def _envfile(s: str) -> str:
    """The agent's own .env double-quoted form (``core.render.envfile``), ``$`` doubled."""
    e = s.replace("$", "$$").replace("\\", "\\\\").replace('"', '\\"')
    return e.replace("\n", "\\n").replace("\r", "\\r")


def forms(secret: str) -> frozenset[str]:
    """Every form in which a tool may print ``secret`` (each char-by-char, so a form of the
    secret is also the middle of the same form of a longer text that holds it)."""
    chars = set(secret)  # each distinct character's form worked out once, not once per place

    def each(form: Callable[[str], str]) -> str:
        table = {c: form(c) for c in chars}
        return "".join(map(table.__getitem__, secret))

    out = {secret, secret.replace("$", "$$"), _envfile(secret)}
    for ascii_only in (False, True):
        out.add(each(functools.partial(_go_char, ascii_only=ascii_only)))
        for html in (False, True):
            out.add(each(functools.partial(_json_char, ascii_only=ascii_only, html=html)))
    out.add(each(_repr_char))
    out.add(each(lambda c: _repr_char(c) if c != "'" else "\\'"))
    out.update(_shell_single(secret))
    out.add(each(lambda c: "\\" + c if c in _SHELL_SPECIAL else c))
    url = each(_url_char)
    out.update((url, url.replace("%20", "+")))
    if _INTEGER.fullmatch(secret):  # read as a number (a port: Go's Atoi), printed as one
        out.add(str(int(secret)))
    if "\n" in secret or "\r" in secret:  # line by line: a tool may print one line of it
        for line in re.split(r"\r\n|\r|\n", secret):
            line = line.strip()
            if len(line) >= MIN_SECRET:
                out.add(line)
    return frozenset(f for f in out if f)


@functools.lru_cache(maxsize=1024)
def _part(secret: str) -> tuple[frozenset[str], frozenset[str], frozenset[str], bool]:
    """What one secret adds to a masker: (8-windows, their 5-grams, exact forms, has '*')."""
    windows: set[str] = set()
    grams: set[str] = set()
    exact: set[str] = set()
    every = forms(secret)
    for form in every:
        if len(secret) >= MIN_RUN and len(form) >= MIN_RUN:
            windows.update(form[i : i + MIN_RUN] for i in range(len(form) - MIN_RUN + 1))
            grams.update(form[i : i + _GRAM] for i in range(len(form) - _GRAM + 1))
        elif len(form) >= MIN_SECRET:
            exact.add(form)
    star = any("*" in f for f in every)
    return frozenset(windows), frozenset(grams), frozenset(exact), star


class Masker:
    """Masks every secret it was built from, in every form (see the module docstring).

    Immutable: ``extend`` returns a new masker. ``repr`` shows only how many secrets it knows.
    """

    __slots__ = ("_exact", "_grams", "_secrets", "_star", "_windows")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        known = frozenset(s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET)
        parts = [_part(s) for s in known]
        self._secrets = known
        self._windows: frozenset[str] = frozenset().union(*(p[0] for p in parts))
        self._grams: frozenset[str] = frozenset().union(*(p[1] for p in parts))
        exact: frozenset[str] = frozenset().union(*(p[2] for p in parts))
        alternatives = sorted(exact, key=lambda f: (-len(f), f))
        self._exact = re.compile("|".join(map(re.escape, alternatives))) if exact else None
        # A form with '*' could match across a MARK just written: then mask to a fixed point.
        self._star = any(p[3] for p in parts)

    def extend(self, secrets: Iterable[str]) -> Masker:
        """A masker that knows these secrets too (self when they add nothing)."""
        more = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET}
        if more <= self._secrets:
            return self
        return Masker(self._secrets | more)

    def __len__(self) -> int:
        return len(self._secrets)

    def __repr__(self) -> str:
        return f"Masker({len(self._secrets)} secrets)"

    def __call__(self, text: str) -> str:
        if not self._secrets or not text:
            return text
        while True:
            masked = self._once(text)
            if masked == text or not self._star:
                return masked
            text = masked

    def _once(self, text: str) -> str:
        spans = self._spans(text)
        if not spans:
            return text
        spans.sort()
        out: list[str] = []
        pos = 0
        start, end = spans[0]
        for s, e in spans[1:]:
            if s <= end:
                end = max(end, e)
                continue
            out += (text[pos:start], MARK)
            pos, start, end = end, s, e
        out += (text[pos:start], MARK, text[end:])
        return "".join(out)

    def _spans(self, text: str) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        n = len(text)
        if self._windows and n >= MIN_RUN:
            grams, windows = self._grams, self._windows
            for base in range(0, n - MIN_RUN + 1, _CHUNK):
                chunk = text[base : base + _CHUNK + MIN_RUN - 1]
                m = len(chunk)
                # the grams at every 4th position (any 8-window match holds one), at C speed
                probes = map(slice, range(0, m - _GRAM + 1, _STRIDE), range(_GRAM, m + 1, _STRIDE))
                if grams.isdisjoint(map(chunk.__getitem__, probes)):
                    continue
                for j in range(0, m - _GRAM + 1, _STRIDE):
                    if chunk[j : j + _GRAM] not in grams:
                        continue
                    # the windows that hold this gram
                    for i in range(max(j - (MIN_RUN - _GRAM), 0), min(j, m - MIN_RUN) + 1):
                        if chunk[i : i + MIN_RUN] in windows:
                            spans.append((base + i, base + i + MIN_RUN))
        if self._exact is not None:
            spans.extend(m.span() for m in self._exact.finditer(text))
        return spans

    def mask_obj(self, value: Any) -> Any:
        """``value`` with every string in it masked (dicts, lists, tuples walked; keys too)."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, Mapping):
            return {self.mask_obj(k): self.mask_obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.mask_obj(v) for v in value)
        return value


NO_SECRETS = Masker()


# -- secrets at rest (a restore or a down runs a revision whose KV values were not read) -------
# (the .env's values: core.render.atrest, read with the agent's own dotenv reader)


def secrets_in_docker_config(data: bytes) -> tuple[str, ...]:
    """The registry credentials of a docker ``config.json``: each ``auth`` (base64), its decoded
    ``user:password`` and the password; ``()`` when the bytes are not such a file."""
    try:
        auths = json.loads(data).get("auths") or {}
    except (ValueError, AttributeError):
        return ()
    found: list[str] = []
    for entry in auths.values() if isinstance(auths, Mapping) else ():
        auth = entry.get("auth") if isinstance(entry, Mapping) else None
        if not isinstance(auth, str):
            continue
        found.append(auth)
        try:
            plain = base64.b64decode(auth, validate=True).decode("utf-8")
        except ValueError:
            continue
        found += [plain, plain.partition(":")[2]]
    return tuple(found)


def strings_in(value: object) -> tuple[str, ...]:
    """Every string (and number, as text) inside a value read from OpenBao: a KV value may be
    an object or a list whose leaves are secrets (its keys are names, not secrets)."""
    found: list[str] = []
    if isinstance(value, str):
        found.append(value)
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int | float):
        found.append(str(value))
    elif isinstance(value, Mapping):
        for v in value.values():
            found += strings_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            found += strings_in(v)
    return tuple(found)
