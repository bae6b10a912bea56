"""A compose model walked against the allow-list (``core.admission.keys``' ``SHAPES``): every key
the table does not know (POLICY_UNKNOWN_KEY, naming its path) and every ``REFUSED`` one that
asks something (POLICY_REFUSED), unless config.yaml's ``policy.keys`` allows its path
(``allowed_by``). ``x-`` keys are compose's extensions and a ``null`` value asks nothing. Pure.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from monky_deployd.core.admission.keys import SHAPES, Kind
from monky_deployd.core.errors import Code


@dataclass(frozen=True, order=True)
class KeyFault:
    """A key refused by the table: its path (``services.web.provider``), the service it
    belongs to ("" at the top level), and why (unknown: empty)."""

    path: str
    service: str
    why: str

    @property
    def code(self) -> Code:
        return Code.POLICY_REFUSED if self.why else Code.POLICY_UNKNOWN_KEY


def allowed_by(path: str, patterns: Iterable[str]) -> bool:
    """``path`` matches one of config.yaml's ``policy.keys`` (dot-separated, ``*`` one name)."""
    parts = path.split(".")
    for pattern in patterns:
        want = pattern.split(".")
        if len(want) == len(parts) and all(
            fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want, strict=True)
        ):
            return True
    return False


def _asks(value: object) -> bool:
    return value not in (None, False, "") and value != {} and value != []


def walk(config: Mapping[str, object], allowed: Iterable[str] = ()) -> list[KeyFault]:
    """Every key of ``config`` the table does not know, and every ``REFUSED`` one that asks
    something, that ``policy.keys`` does not allow; sorted."""
    patterns = tuple(allowed)
    found: list[KeyFault] = []
    _walk(config, "top", "", "", patterns, found)
    return sorted(set(found))


def _walk(
    value: object,
    shape: str,
    path: str,
    service: str,
    allowed: tuple[str, ...],
    out: list[KeyFault],
) -> None:
    if isinstance(value, list):
        for item in value:
            _walk(item, shape, path, service, allowed, out)
        return
    if not isinstance(value, dict):
        return  # a short syntax ("/a:/b", "8080:80"): read by its judge
    table = SHAPES[shape]
    for name, inner in value.items():
        name = str(name)
        here = f"{path}.{name}" if path else name
        if name.startswith("x-") or inner is None:
            continue
        key = table.get(name)
        if key is None:
            if not allowed_by(here, allowed):
                out.append(KeyFault(here, service, ""))
            continue
        if key.kind is Kind.REFUSED:
            if _asks(inner) and not allowed_by(here, allowed):
                out.append(KeyFault(here, service, key.why))
            continue
        if not key.shape:
            continue
        if key.named and isinstance(inner, dict):
            for item, spec in inner.items():
                owner = str(item) if shape == "top" and name == "services" else service
                _walk(spec, key.shape, f"{here}.{item}", owner, allowed, out)
        else:
            _walk(inner, key.shape, here, service, allowed, out)
