"""``monky-deployd status``: the verdict and its exit status, and the table's rows. PURE.

``verdict(StatusFacts)`` turns what the state dir says (the tick ledger's last tick, the applied and
held records, a suspend, the update locks, the clock) into one state and its exit status, the
first that applies, in this order (OPERATIONS.md, "Status"):

    failed       1  systemd says the unit's last tick failed, and the ledger does not record it
                    (a tick that could not write its state dir): whoever runs status
    stale        10 the timer is installed but not waiting (stopped, failed, disabled)
    no_tick      8  no tick is recorded (a fresh box, or the ledger was lost)
    stale        10 the last recorded tick ended more than STALE_AFTER_S ago (the timer stopped?)
    clock_suspect 12 the last recorded tick ended in the future (``core.clock``): the clock
                    stepped back since, or that tick's clock was ahead; its age says nothing
    stalled      7  a failed rollback stalls the box (ROLLBACK_FAILED): no tick acts on its own
    degraded     13 a long-running service of the applied revision is not running, or unhealthy
                    (named; a finished job is not a fault: core.lifecycle.jobs)
    failed       1  the last tick failed or was refused (not the held revision's own failure)
    paused       9  applies are suspended, or the last tick was stopped by an update lock
    held         6  the desired revision failed here: rolled back and held, or backing off
    waiting      11 a new revision waits for an update window or this box's rollout place
    not_applied  14 tenancy names a revision the box does not run (and nothing above says why)
    ok           0  the box was at its desired revision and healthy on the last tick

and, when there is no verdict to make (``agent.commands.status_fault``):

    config_error 3  config.yaml missing, unreadable or invalid
    unreadable   15 the state dir (or the lock dir) cannot be read by this user, or holds
                    entries the unit's user does not own (whoever runs status)

``rows(view)`` shapes ``agent.commands.status``'s JSON view into (label, text) pairs for the
terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monky_deployd.core.clock import suspect_future
from monky_deployd.core.errors import Code, code_named
from monky_deployd.core.records.ledger import FAILURE, SUCCESS, Entry

STALE_AFTER_S = 600.0  # ten timer intervals without a recorded tick
LOCKS_SHOWN = 10  # lock names in the table; the rest counted

EXIT_STATUS = {
    "ok": 0,
    "failed": 1,
    "held": 6,
    "stalled": 7,
    "no_tick": 8,
    "not_applied": 14,
    "paused": 9,
    "stale": 10,
    "waiting": 11,
    "degraded": 13,
    "clock_suspect": 12,
    "config_error": 3,
    "unreadable": 15,
}


@dataclass(frozen=True)
class StatusFacts:
    now: float
    last: Entry | None  # the ledger's last tick
    applied: str | None  # applied.json (the last-known-good revision)
    desired: str | None  # as the last check-in named it
    held: str | None = None  # held.json's revision
    held_stalled: bool = False
    suspended: bool = False  # an active suspend now
    locked: bool = False  # an update lock in force now
    stale_after_s: float = STALE_AFTER_S
    # each service of the applied revision -> core.lifecycle.jobs.service_states' word (empty: the
    # engine was not asked or did not answer)
    services: tuple[tuple[str, str], ...] = ()
    no_healthcheck: tuple[str, ...] = ()  # running services without a healthcheck
    baking: str = ""  # "revision r2 bakes until ..." while the last commit bakes
    unit_failed: str = ""  # systemd's word that the unit's last tick failed (core.commands.unit)
    unit_failed_at: float | None = None  # when that tick ended
    timer_stopped: str = ""  # the timer is installed but not waiting: no tick comes
    # systemd runs but could not be asked (no system bus for this user): the unit's facts
    # above are unknown, not fine; the sentence and its fix
    unit_unasked: str = ""


def _services_note(f: StatusFacts) -> str:
    notes = []
    if f.no_healthcheck:
        notes.append(f"no healthcheck: {', '.join(f.no_healthcheck)} (running is all it shows)")
    if f.baking:
        notes.append(f.baking)
    return "".join(f"; {n}" for n in notes)


@dataclass(frozen=True)
class Verdict:
    state: str
    exit_status: int
    reason: str


def _v(state: str, reason: str) -> Verdict:
    return Verdict(state, EXIT_STATUS[state], reason)


def _ledger_has_it(f: StatusFacts) -> bool:
    """The ledger's last tick is the unit's failed one (it names the fault better): a failure
    that ended no earlier than the unit's last tick (1 s: systemd's stamp is whole seconds)."""
    last = f.last
    ended = f.unit_failed_at
    return (
        last is not None
        and last.outcome in FAILURE
        and (ended is None or last.finished_at >= ended - 1)
    )


def verdict(f: StatusFacts) -> Verdict:
    """The first state that applies (the module's list); where systemd could not be asked,
    the reason says so: the unit's failure and a stopped timer are then unknown."""
    found = _verdict(f)
    if not f.unit_unasked:
        return found
    return Verdict(found.state, found.exit_status, f"{found.reason}; {f.unit_unasked}")


def _verdict(f: StatusFacts) -> Verdict:
    last = f.last
    if f.unit_failed and not _ledger_has_it(f):
        return _v("failed", f.unit_failed)
    if f.timer_stopped:
        return _v("stale", f.timer_stopped)
    if last is None:
        return _v("no_tick", "no tick is recorded yet (a fresh box, or the tick ledger was lost)")
    age = f.now - last.finished_at
    if suspect_future(last.finished_at, f.now):
        return _v(
            "clock_suspect",
            f"the last recorded tick ended {-age:.0f} s in the future: the clock stepped back "
            "since, or that tick's clock was ahead (check timedatectl / chronyc tracking); "
            "the next tick replaces it",
        )
    if age > f.stale_after_s:
        return _v(
            "stale",
            f"the last recorded tick ended {age:.0f} s ago (more than {f.stale_after_s:.0f} s): "
            "is monky-deployd.timer running?",
        )
    code = code_named(last.code)
    if f.held_stalled or code is Code.ROLLBACK_FAILED:
        return _v(
            "stalled",
            f"revision {f.held or last.revision} failed and the rollback failed too: "
            "no tick applies or rolls back on its own",
        )
    down = [(n, w) for n, w in f.services if w not in ("ok", "done")]
    if down:
        return _v(
            "degraded",
            "not running as it should: " + ", ".join(f"{n} {w}" for n, w in down),
        )
    own_failure = f.held is not None and last.revision == f.held
    if last.outcome in FAILURE and not own_failure:
        return _v("failed", f"the last tick {last.outcome} ({last.code}): {last.message}")
    if f.suspended or code is Code.SUSPENDED:
        return _v("paused", "applies are suspended (monky-deployd resume)")
    behind = f.desired is not None and f.desired != f.applied
    if code is Code.UPDATE_LOCKED or (f.locked and behind):
        return _v("paused", "an update lock stops the apply (monky-deployd lock list)")
    if f.held is not None and (f.desired is None or f.held == f.desired):
        return _v("held", f"revision {f.held} failed here and is held or backing off")
    if last.outcome == "held" or last.outcome in FAILURE:
        return _v("held", f"the last tick was held ({last.code}): {last.message}")
    if last.outcome == "waiting":
        return _v("waiting", f"the last tick waited ({last.code}): {last.message}")
    if behind:
        return _v(
            "not_applied",
            f"tenancy wants revision {f.desired}, the box runs {f.applied or '(nothing)'}",
        )
    if last.outcome in SUCCESS:
        return _v("ok", (last.message or "at the desired revision") + _services_note(f))
    return _v("failed", f"the last tick ended {last.outcome!r} ({last.code})")  # not reached


# -- the table -------------------------------------------------------------------------------------


def _when(view: dict[str, Any], key: str) -> str:
    value = view.get(key)
    return "-" if value is None else str(value)


def _signatures(t: dict[str, Any]) -> str:
    high = f"highest release applied {t['highest_version']} ({t['highest_revision']})"
    if t["running_version"] is None:
        return f"running revision not verified; {high}"
    state = "signatures EXPIRED at" if t["running_expired"] else "signed, valid until"
    return f"running release {t['running_version']}: {state} {t['running_expires']}; {high}"


def rows(view: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) pairs for the terminal, from ``agent.commands.status``'s JSON view."""
    out: list[tuple[str, str]] = [
        ("state", f"{view['state']} (exit {view['exit_status']}): {view['reason']}")
    ]
    rev = view["revisions"]
    out.append(("desired", f"{rev['desired'] or '-'} (seen {rev['desired_seen_at'] or '-'})"))
    out.append(("applied", rev["applied"] or "-"))
    out.append(("last-known-good", rev["last_known_good"] or "-"))
    why = "; ".join(f"{r['kind']} {r['detail']}".strip() for r in rev.get("reasons", []))
    out.append(("applied because", f"{why or '-'} (deploy {rev.get('deploy_id') or '-'})"))
    held = view["held"]
    if held:
        what = "stalled" if held["stalled"] else "held"
        nxt = f", next attempt {held['next_attempt_at']}" if held["next_attempt_at"] else ""
        out.append(("held", f"{held['revision']} {what}: {held['code']} x{held['attempts']}{nxt}"))
        if held.get("message"):  # why it is not applied (a refused signature, a failure)
            out.append(("", held["message"]))
    else:
        out.append(("held", "-"))
    signed = view.get("trust")
    if signed:  # signed bundles (contract v1.3): the running release and its expiry
        out.append(("signatures", _signatures(signed)))
    last = view["last_tick"]
    if last:
        out.append(
            (
                "last tick",
                f"{last['finished_at']} {last['outcome']} {last['code']} "
                f"{last['revision'] or '-'} in {last['duration_ms']} ms",
            )
        )
        if last["message"]:
            out.append(("", last["message"]))
    else:
        out.append(("last tick", "-"))
    out.append(("last success", _when(view, "last_success_at")))
    tok = view["token"]
    if tok:
        renew = "renewable" if tok["renewable"] else "not renewable"
        out.append(
            (
                "token",
                f"{tok['kind']}, expires {tok['expires_at']} (in {tok['expires_in_s']} s), {renew}",
            )
        )
    else:
        out.append(("token", "-"))
    out.append(("leases (1 h)", str(view["leases_last_hour"])))
    win = view.get("windows") or {}
    if win.get("configured"):
        now_open = (
            f"open until {win['closes_at']}" if win["open"] else f"closed, opens {win['opens_at']}"
        )
        out.append(("update windows", f"{now_open} ({'; '.join(win['configured'])})"))
    else:
        out.append(("update windows", "none (a new revision is applied at any time)"))
    wait = view.get("waiting")
    if wait:
        place = (
            f"; rollout place {wait['rollout_offset_s']} s of {wait['spread_s']} s"
            + (" (canary)" if wait["canary"] else "")
            if wait["spread_s"]
            else ""
        )
        when = f"applies at {wait['until']} ({wait['why']})" if wait["until"] else "due"
        out.append(
            (
                "new revision",
                f"{wait['revision']} first seen {wait['first_seen_at']}: {when}{place}",
            )
        )
    sus = view["suspended"]
    out.append(("suspended", f"until {sus['until'] or 'resume'}: {sus['reason']}" if sus else "no"))
    shown = view["locks"][:LOCKS_SHOWN]
    names = ", ".join(lk["name"] + (" (stale)" if lk["stale"] else "") for lk in shown)
    if len(view["locks"]) > LOCKS_SHOWN:
        names += f" and {len(view['locks']) - LOCKS_SHOWN} more (monky-deployd lock list)"
    out.append(("update locks", names or "none"))
    strays = view.get("strays") or []
    if strays:  # what the next tick moves away: a link, a FIFO ... where the agent reads
        said = "; ".join(f"{s['name']} is {s['why']}" for s in strays[:LOCKS_SHOWN])
        more = f" and {len(strays) - LOCKS_SHOWN} more" if len(strays) > LOCKS_SHOWN else ""
        out.append(("not a record", f"{said}{more}: read as absent, the next tick sets it aside"))
    aside = view.get("set_aside") or []
    if aside:  # what a tick found where the agent reads and moved away (newest first)
        first = aside[0]
        more = f" and {len(aside) - 1} more" if len(aside) > 1 else ""
        what = f"{first['name']} ({first['kind']})" if first.get("kind") else first["name"]
        out.append(("set aside", f"{what} at {first['at']}{more} (state dir's aside/)"))
    if view["interrupted"]:
        cut = view["interrupted"]
        out.append(("interrupted", f"tick {cut['tick_id']} in {cut['phase']} of {cut['revision']}"))
    svc = view["services"]
    out.append(("engine", f"{svc['engine']} (project {svc['project'] or '-'})"))
    for c in svc["containers"]:
        health = f"/{c['health']}" if c["health"] else ""
        digest = c["digest"] or c["image_id"][:19]
        out.append(
            (f"  {c['service']}", f"{c['state']}{health} since {c['since'] or '-'} {digest}")
        )
    timer = view["timer"]
    if timer.get("stopped"):
        out.append(("next tick", f"none: {timer['stopped']}"))
    else:
        where = "no systemd timer here" if timer.get("state") is None else timer["state"]
        if timer.get("unasked"):
            where = "unknown: systemd could not be asked (no system bus, above)"
        out.append(("next tick", timer["next_run_at"] or f"- ({where})"))
    if timer.get("last_tick_failed"):
        out.append(("unit", timer["last_tick_failed"]))
    for h in view["history"]:
        times = f" x{h['repeats']}" if h["repeats"] > 1 else ""
        rb = f" -> rolled back to {h['rollback_to']}" if h["rollback_to"] else ""
        out.append(
            (
                "history",
                f"{h['finished_at']} {h['outcome']} {h['code']} {h['revision'] or '-'}{times}{rb}",
            )
        )
    return out


def table(view: dict[str, Any]) -> str:
    pairs = rows(view)
    width = max(len(label) for label, _ in pairs)
    return "\n".join(f"{label:<{width}}  {text}".rstrip() for label, text in pairs) + "\n"
