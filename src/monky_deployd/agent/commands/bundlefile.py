"""The ``bundle`` commands' inputs: a file or stdin (``-``) read whole, the bundle JSON object,
and their usage fault (``Usage``: its text is the whole message, never a key's bytes). Shared
by ``bundlecmd`` (sign, verify, public-key) and ``bundlecheck``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


class Usage(Exception):
    """A usage fault: its text is the whole message (never a key's bytes)."""


def read_input(name: str, what: str) -> bytes:
    """The file ``name`` (``-``: stdin) read whole; ``Usage`` naming ``what`` otherwise."""
    try:
        return sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise Usage(f"cannot read the {what} {name}: {exc.strerror or exc}") from None


def read_bundle(name: str) -> dict[str, Any]:
    """The bundle JSON file ``name`` (``-``: stdin) as an object; ``Usage`` otherwise."""
    import json

    try:
        found = json.loads(read_input(name, "bundle"))
    except ValueError:
        raise Usage(f"the bundle {name} is not JSON") from None
    if not isinstance(found, dict):
        raise Usage(f"the bundle {name} is not a JSON object")
    return found
