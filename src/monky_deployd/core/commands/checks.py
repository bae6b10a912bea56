"""``monky-deployd doctor``'s pure parts: a check's result, its one line, the exit status, and
the decisions that need no I/O (the grant's claims, clock skew, who may read a file, the
tenancy intercept port, the timer's answer). ``agent.commands.doctor`` asks the box and the
services.

A check's line is ``<STATUS> <check>: <fact>`` and, for WARN and FAIL, ``. Check: <hint>``.
STATUS is OK, WARN, FAIL or SKIP: a check whose prerequisite did not pass is SKIP with the fact
``needs <prerequisite> (<its status> above)``; SKIP alone never changes the exit status (the
check it waits for already did). Exit status: 0 all OK (or SKIP), 1 a WARN, 2 a FAIL.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

Status = Literal["OK", "WARN", "FAIL", "SKIP"]
STATUSES: tuple[Status, ...] = ("OK", "WARN", "FAIL", "SKIP")

# Clock skew against tenancy's Date header: OpenBao allows 60 s of leeway on a JWT's exp, iat
# and nbf; a token's expiry is kept in the box's own time. Date has a 1 s resolution.
SKEW_WARN_S = 30.0
SKEW_FAIL_S = 300.0
GRANT_WARN_S = 86400.0  # a grant that expires within a day: the next kit is due
TENANCY_INTERCEPT_PORT = 443
ZITI_TENANCY_HOST = "tenancy.monky.ziti"


@dataclass(frozen=True)
class Check:
    """One check's result. ``fact`` and ``hint`` never hold a secret (they are the adapters'
    own sentences, which never do, and doctor masks them once more)."""

    check: str
    status: Status
    fact: str
    hint: str = ""
    code: str | None = None
    detail: str = ""  # the other side's own words (an SDK's log, a registry's answer), masked

    def as_json(self) -> dict[str, str | None]:
        return {
            "check": self.check,
            "status": self.status,
            "fact": self.fact,
            "hint": self.hint if self.status in ("WARN", "FAIL") else "",
            "code": self.code,
            "detail": self.detail,
        }


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined by ``; `` (by a space after a line's colon or
    full stop) and no line's trailing colon left dangling (``x is invalid:`` + ``at 'a': bad``
    -> ``x is invalid: at 'a': bad``)."""
    parts = [line.strip() for line in text.splitlines() if line.strip()]
    out = ""
    for part in parts:
        if not out:
            out = part
        elif out.endswith((":", ".")):  # a list after its colon, a sentence after a sentence
            out = f"{out} {part}"
        else:
            out = f"{out}; {part}"
    return out.rstrip(":").rstrip()


def sentence(text: str) -> str:
    """``text`` ending in exactly one full stop (unless it ends in other punctuation)."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else f"{text}."


def line(c: Check) -> str:
    """The human line of a check (the Check part only for WARN and FAIL)."""
    text = f"{c.status} {c.check}: {one_line(c.fact) or 'no fact'}"
    hint = one_line(c.hint)
    if c.status in ("WARN", "FAIL") and hint:
        return f"{sentence(text)} Check: {sentence(hint)}"
    return sentence(text)


def exit_status(results: Iterable[Check]) -> int:
    statuses = {c.status for c in results}
    if "FAIL" in statuses:
        return 2
    return 1 if "WARN" in statuses else 0


def from_error(name: str, err: DeployError, status: Status = "FAIL") -> Check:
    """A check that an adapter's refusal decided: its sentence is the fact."""
    return Check(name, status, one_line(err.message), one_line(err.hint), str(err.code), err.detail)


def skipped(name: str, needs: str, status: Status) -> Check:
    return Check(name, "SKIP", f"needs {needs} ({status} above)")


def first_not_ok(results: Sequence[Check]) -> Check | None:
    return next((c for c in results if c.status != "OK"), None)


# -- durations -------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """``2 d 3 h``, ``5 h 12 m``, ``4 m 10 s``, ``12 s``: the two largest units."""
    s = int(abs(seconds))
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if d:
        return f"{d} d {h} h"
    if h:
        return f"{h} h {m} m"
    if m:
        return f"{m} m {s % 60} s"
    return f"{s} s"


# -- the grant -------------------------------------------------------------------------------


def grant_claims(jwt: str) -> dict[str, object] | None:
    """The grant's claims, unverified (OpenBao verifies); None when they cannot be read."""
    try:
        payload = jwt.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


def grant_check(name: str, path: str, jwt: str, env: str, now: float) -> Check:
    """readable (the caller read it), not expired, for this environment; its jti."""
    claims = grant_claims(jwt)
    if claims is None:
        return Check(
            name,
            "FAIL",
            f"the grant file {path} holds a JWT whose claims are not JSON",
            f"that {path} is the grant.jwt of this environment's kit",
            str(Code.GRANT_UNREADABLE),
        )
    jti = str(claims.get("jti") or "?")
    genv = str(claims.get("env") or "?")
    exp = claims.get("exp")
    if genv != env:
        return Check(
            name,
            "FAIL",
            f"the grant {path} (jti {jti}) is for environment {genv}, not {env}",
            "`env` in config.yaml and the kit this grant came from",
            str(Code.GRANT_REJECTED),
        )
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        return Check(name, "OK", f"{path} is readable: jti {jti}, env {genv}, no exp claim")
    left = float(exp) - now
    if left <= 0:
        return Check(
            name,
            "WARN",
            f"the grant {path} (jti {jti}) expired {duration(left)} ago: the box can log in "
            "to OpenBao again only with a new kit (a held lease token still works)",
            "reveal a new kit for this environment and install its grant.jwt on this box",
            str(Code.GRANT_EXPIRED),
        )
    fact = f"{path} is readable: jti {jti}, env {genv}, expires in {duration(left)}"
    if left < GRANT_WARN_S:
        return Check(
            name,
            "WARN",
            fact,
            "a new kit for this environment before then (a box without a token needs it)",
            str(Code.GRANT_EXPIRED),
        )
    return Check(name, "OK", fact)


# -- clock skew ------------------------------------------------------------------------------


def skew_check(name: str, local: float, remote: float | None, where: str) -> Check:
    if remote is None:
        return Check(
            name,
            "WARN",
            f"{where} sent no Date header, so the skew cannot be measured",
            "the box's clock (timedatectl, NTP)",
        )
    skew = local - remote
    ahead = "ahead of" if skew > 0 else "behind"
    fact = f"this box's clock is {duration(skew)} {ahead} {where}'s Date"
    if abs(skew) < SKEW_WARN_S:
        return Check(name, "OK", f"{fact} (within {SKEW_WARN_S:g} s)")
    status: Status = "FAIL" if abs(skew) >= SKEW_FAIL_S else "WARN"
    return Check(
        name,
        status,
        fact + "; OpenBao allows 60 s on a grant's times and token expiries are kept in "
        "this box's time",
        "the box's clock (timedatectl, NTP)",
    )


# -- who may read a file ---------------------------------------------------------------------


def access_via(
    uid: int, gids: Iterable[int], st_uid: int, st_gid: int, mode: int, want: int = 4
) -> Literal["owner", "group", "other", "root"] | None:
    """How a user reaches a file by its mode bits alone (``want``: 4 read, 6 read+write), or
    None: then only an ACL (or nothing) lets the user in."""
    if uid == 0:
        return "root"
    bits = mode & 0o7777
    if uid == st_uid:
        return "owner" if (bits >> 6) & want == want else None
    if st_gid in set(gids):
        return "group" if (bits >> 3) & want == want else None
    return "other" if bits & want == want else None


# -- the tenancy intercept -------------------------------------------------------------------


def intercept_check(name: str, transport: str, host: str, port: int) -> Check:
    """tenancy's intercept is 443; a plain transport to another host dials what it is given."""
    if (transport == "ziti" or host == ZITI_TENANCY_HOST) and port != TENANCY_INTERCEPT_PORT:
        return Check(
            name,
            "FAIL",
            f"tenancy.port in config.yaml is {port} but the monky.tenancy.deploy "
            f"intercept is {TENANCY_INTERCEPT_PORT} (the in-pod listener is never dialled)",
            f"tenancy.port in config.yaml: {TENANCY_INTERCEPT_PORT} or unset",
            str(Code.ZITI_NO_SERVICE),
        )
    return Check(name, "OK", f"tenancy is dialled at {host}:{port} ({transport} transport)")


# -- the timer -------------------------------------------------------------------------------


def timer_check(name: str, unit: str, returncode: int, words: str) -> Check:
    """``systemctl is-enabled <unit>``'s answer."""
    answer = words.strip().splitlines()[-1].strip() if words.strip() else ""
    if returncode == 0 and answer in ("enabled", "enabled-runtime", "static", "alias"):
        return Check(name, "OK", f"{unit} is {answer}")
    lowered = words.lower()
    if "not been booted with systemd" in lowered or "failed to connect to bus" in lowered:
        return Check(
            name,
            "WARN",
            f"systemd is not running here, so {unit} cannot be asked about ({one_line(words)})",
            "that this box boots with systemd; without it nothing starts the agent's ticks",
        )
    state, hint = answer or "not enabled", f"`systemctl enable --now {unit}`"
    if "no such file" in lowered or answer == "not-found":
        state = f"not installed ({one_line(words)})"
        hint = f"that the monky-deployd package is installed (it ships {unit}), then {hint}"
    return Check(name, "FAIL", f"{unit} is {state}: nothing starts the agent's ticks", hint)
