"""The grant file: the JWT the kit installs (``grant_file`` in config.yaml), which logs the agent
in to OpenBao (``adapters.net.bao.Bao.login_jwt``) and names the grant its tokens came from."""

from __future__ import annotations

from pathlib import Path

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import TokenError


def read_grant(path: Path) -> str:
    """The grant JWT from ``path``, trailing newline/spaces stripped (GRANT_MISSING/UNREADABLE)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise TokenError(
            f"the grant file {path} does not exist, so the agent cannot log in to OpenBao",
            code=Code.GRANT_MISSING,
            hint=f"that the kit installed {path} (owner monky-deployd, mode 0600), "
            "or `grant_file` in config.yaml",
        ) from exc
    except OSError as exc:
        raise TokenError(
            f"cannot read the grant file {path}: {exc.strerror or exc}",
            code=Code.GRANT_UNREADABLE,
            hint=f"owner and mode of {path}: owner monky-deployd, mode 0600",
        ) from exc
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise TokenError(
            f"the grant file {path} is not a JWT (it holds non-ASCII bytes)",
            code=Code.GRANT_UNREADABLE,
            hint=f"that {path} is the grant.jwt of this environment's kit",
        ) from exc
    if not text or text.count(".") != 2 or any(c.isspace() for c in text):
        raise TokenError(
            f"the grant file {path} does not hold a JWT"
            + (" (it is empty)" if not text else " (expected three dot-separated parts)"),
            code=Code.GRANT_UNREADABLE,
            hint=f"that {path} is the grant.jwt of this environment's kit",
        )
    return text
