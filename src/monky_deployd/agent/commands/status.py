"""``monky-deployd status``: what the box knows about itself, from local state only.

Reads the state dir (the tick ledger, applied.json, held.json, token.json's bookkeeping, the
suspend record, a killed tick's journal, what is and was set aside: ``agent.observe.recorded``), the
update-lock directory, the Engine API (the project's containers: read-only GETs on the local
socket) and, where systemd runs, ``systemctl list-timers`` for the timer's next start. No
request to tenancy or OpenBao, no lock taken, nothing written: the state dir is byte-identical
afterwards. An engine that does not answer is a line in the output, never a crash.
``core.commands.status`` decides the exit status and shapes the table; ``view`` is the JSON
(``--json``; schema version ``SCHEMA``, OPERATIONS.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

from monky_deployd.adapters.box import runner
from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.fsutil import user_name
from monky_deployd.agent.apply import trust
from monky_deployd.agent.observe import observe, recorded
from monky_deployd.config import Config
from monky_deployd.core.commands import status, unit
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle import schedule
from monky_deployd.core.lifecycle.services import ServiceState, foreign, repo_digest
from monky_deployd.core.records import ledger
from monky_deployd.core.records.applied import Applied
from monky_deployd.core.records.held import Stalled
from monky_deployd.core.records.tickrecord import rfc3339, whole_seconds

SCHEMA = 1
TIMER = "monky-deployd.timer"


def _t(ts: float | None) -> str | None:
    return None if ts is None else rfc3339(ts, "seconds")


def _entry(e: ledger.Entry | None) -> dict[str, Any] | None:
    out = ledger.entry_dict(e, phases=False)
    if out is not None:
        out["started_at"], out["finished_at"] = _t(out["started_at"]), _t(out["finished_at"])
    return out


def services(cfg: Config, applied: Applied | None, now: float) -> dict[str, Any]:
    """The project's containers as the engine sees them now, and the jobs done for them
    (``observe.jobs_done``: what the tick decides from); the engine's fault as text."""
    project = applied.project if applied is not None else None
    out: dict[str, Any] = {"engine": "not asked", "project": project, "containers": []}
    if applied is None:
        out["engine"] = "not asked (nothing applied)"
        return out
    try:
        from monky_deployd.adapters.box.docker import watch  # (not a no-op's)

        found = watch.inspect_project(cfg.docker, applied.project)
        digests: dict[str, str] = {}
        for c in found:
            if c.image_id and c.image_id not in digests:
                known = docker_api.repo_digests(cfg.docker, c.image_id)
                digests[c.image_id] = repo_digest(c.image_ref, known)
        states = tuple(
            ServiceState(
                c.service,
                c.state,
                c.health,
                c.image_ref,
                c.exit_code if c.state in ("exited", "dead") else None,
                c.container_id,
                c.made_by,
            )
            for c in found
        )
        out["done_jobs"] = list(observe.jobs_done(cfg, applied, states, now)[0])
        made = {k: f"{lb.revision}/{lb.deploy_id}" for k, lb in applied.service_labels.items()}
        out["foreign"] = dict(foreign(made, states))
    except DeployError as err:
        out["engine"] = f"unreachable: {err.code}: {err.message}"
        return out
    out["engine"] = "ok"
    out["containers"] = [
        {
            "service": c.service,
            "state": c.state,
            "health": c.health,
            "image": c.image_ref,
            "image_id": c.image_id,
            "digest": digests.get(c.image_id, ""),
            "since": c.started_at or None,
            "exit_code": c.exit_code if c.state in ("exited", "dead") else None,
        }
        for c in found
    ]
    return out


def next_timer_run() -> str | None:
    """The timer's next start, or None without systemd or the timer. ``list-timers`` and not
    ``show -p NextElapseUSecRealtime``: the timer is monotonic (OnBootSec=, OnUnitInactiveSec=),
    so that property is empty and NextElapseUSecMonotonic counts from boot; list-timers turns
    it into wall-clock time (its JSON: microseconds since the epoch; systemd 252)."""
    argv = ("systemctl", "list-timers", TIMER, "--all", "--output=json")
    try:
        result = runner.run(argv, env=runner.base_env(), timeout=5, check=False)
    except DeployError:
        return None  # no systemctl here
    if result.returncode != 0:
        return None  # not booted with systemd (a container), or no bus
    try:
        rows = json.loads(result.stdout)
    except ValueError:
        return None
    for row in rows if isinstance(rows, list) else []:
        nxt = row.get("next") if isinstance(row, dict) else None
        if row.get("unit") == TIMER and isinstance(nxt, int) and not isinstance(nxt, bool):
            return _t(nxt / 1e6) if 0 < nxt < 2**63 - 1 else None
    return None


def timer_view() -> dict[str, Any]:
    """The units as systemd sees them (``core.commands.unit``): the next start, a timer that is not
    waiting (``stopped``: the sentence), a last tick that failed (its sentence); all empty
    where systemd does not run. Whoever runs status, these are the unit's facts."""
    from monky_deployd.adapters.box import unit as unit_adapter

    units = unit_adapter.read()
    out: dict[str, Any] = {
        "next_run_at": None,
        "state": None,
        "stopped": None,
        "last_tick_failed": None,
        "last_tick_at": None,
        "unasked": None,
    }
    if isinstance(units, unit.NoBus):  # systemd runs; this user cannot ask it (no D-Bus)
        out["unasked"] = f"{units.fact(user_name(os.geteuid()), TIMER)}; {units.fix}"
        return out
    if units is None:
        return out
    check = unit.timer_check("timer", units)
    out["state"] = f"{units.timer.file_state or 'not enabled'}, {units.timer.active or '?'}"
    if check.status != "OK":
        out["stopped"] = f"{check.fact}; {check.hint}"
    else:
        out["next_run_at"] = next_timer_run()
    svc = units.service
    out["last_tick_at"] = svc.exited_at
    if unit.last_tick_failed(units):
        out["last_tick_failed"] = unit.failed_reason(units, _t(svc.exited_at) or "")
    return out


def _waiting(cfg: Config, seen: schedule.Seen) -> dict[str, Any]:
    """waiting.json: a new revision's first sight, this box's rollout place, when it applies."""
    return {
        "revision": seen.revision,
        "first_seen_at": _t(seen.first_seen_at),
        "until": _t(seen.until),
        "why": seen.why,
        "spread_s": seen.spread_s,
        "rollout_offset_s": round(schedule.offset(cfg.env, seen.revision, seen.spread_s)),
        "canary": seen.spread_s > 0 and schedule.is_canary(cfg.env, seen.revision),
    }


def unreadable(cfg: Config, problem: str | None) -> DeployError | None:
    """Why the state dir cannot be read, or holds entries the unit's user cannot read or
    replace: the cause (``owner.poisoned_error``: the entries another account owns and the
    ``chown`` that mends them; the same answer whoever runs status), else the tick ledger's
    own problem when it is one of access (``problem``: ``read_ledger``'s reason). None when
    the agent's user reads and replaces everything."""
    from monky_deployd.adapters.box.state import owner

    poisoned = owner.poisoned_error(cfg.state_dir, cfg.service_user)
    if poisoned is not None:
        return poisoned
    if problem is None or problem == "absent" or "unreadable (" not in problem:
        return None  # no ledger yet, or one that is not a record (a fresh ledger: no_tick)
    return DeployError(
        f"the tick ledger {problem}",
        code=Code.STATE_UNWRITABLE,
        hint=owner.chown_hint(cfg.state_dir, cfg.service_user),
    )


def view(cfg: Config, now: float | None = None, *, engine: bool = True) -> dict[str, Any]:
    """Everything ``status`` prints, as JSON-ready data (schema ``SCHEMA``). Raises
    STATE_UNWRITABLE (``unreadable``) first when the state dir cannot be read or holds entries
    the unit's user cannot replace: status then answers ``unreadable`` (exit 15)."""
    now = time.time() if now is None else now
    seen = recorded.recorded(cfg, StateDir(cfg.state_dir), now)
    led, problem = seen.ledger, seen.ledger_problem
    if (fault := unreadable(cfg, problem)) is not None:
        raise fault
    applied, held, token = seen.local.record, seen.local.held, seen.token
    found, valid, stale = seen.locks, seen.valid_locks, seen.stale_locks
    active, lkg, running = seen.suspended, seen.last_known_good, seen.running
    svc = (
        services(cfg, applied, now)
        if engine
        else {"engine": "not asked", "project": None, "containers": []}
    )
    from monky_deployd.agent.commands import health  # the services' verdict and the bake (issue 21)

    fit = health.of(StateDir(cfg.state_dir), applied, svc, now)
    flat = json.loads(held.to_json()) if held is not None else {}  # held.json's flat fields
    timer = timer_view()
    verdict = status.verdict(
        status.StatusFacts(
            now=now,
            last=led.last,
            applied=running,
            desired=led.desired,
            held=held.revision if held else None,
            held_stalled=isinstance(held, Stalled),
            suspended=active is not None,
            locked=bool(valid),
            services=fit.states,
            no_healthcheck=fit.no_healthcheck,
            baking=fit.baking,
            unit_failed=timer["last_tick_failed"] or "",
            unit_failed_at=timer["last_tick_at"],
            timer_stopped=timer["stopped"] or "",
            unit_unasked=timer["unasked"] or "",
        )
    )
    tok = token.token if token is not None else None
    journal = seen.interrupted
    windows = cfg.windows
    win = schedule.window_state(windows, now)
    waiting_rec = seen.local.waiting
    return {
        "schema": SCHEMA,
        "state": verdict.state,
        "exit_status": verdict.exit_status,
        "reason": verdict.reason,
        "now": _t(now),
        "ledger": "ok" if problem is None else problem,
        "revisions": {
            "desired": led.desired,
            "desired_seen_at": _t(led.desired_seen_at),
            "applied": running,
            "applied_at": applied.applied_at or None if applied else None,
            "last_known_good": lkg,
            # why the last-known-good was applied, and the deploy id its containers carry
            "deploy_id": applied.deploy_id or None if applied else None,
            "reasons": [dict(r) for r in applied.reasons] if applied else [],
        },
        "held": None
        if held is None
        else {
            "kind": type(held).__name__,
            "revision": held.revision,
            "code": held.code,
            "message": ledger.cut(held.message),
            "attempts": held.attempts,
            "failed_at": _t(held.failed_at) if held.failed_at else None,
            "next_attempt_at": _t(flat["next_attempt_at"]),
            "rolled_back_to": flat["rolled_back_to"],
            "rollback_ok": flat["rollback_ok"],
            "stalled": flat["stalled"],
        },
        "last_tick": _entry(led.last),
        "last_success_at": _t(led.last_success_at),
        "counters": {
            "ticks": {k: led.ticks.get(k, 0) for k in ledger.OUTCOMES},
            "consecutive_failures": led.consecutive_failures,
            "rollbacks": led.rollbacks,
            "rollbacks_failed": led.rollbacks_failed,
            "leases_total": led.leases_total,
        },
        "token": None
        if tok is None
        else {
            "kind": tok.kind,
            "expires_at": _t(tok.expires_at),
            "expires_in_s": whole_seconds(tok.expires_at - now),
            "renewable": tok.renewable,
            "lease_id": tok.lease_id or None,
            "obtained_at": _t(tok.obtained_at),
            "lease_not_before": _t(token.lease_not_before) if token else None,
        },
        "leases_last_hour": led.leases_since(now - ledger.LEASE_WINDOW_S),
        "suspended": None
        if active is None
        else {"since": _t(active.since), "until": _t(active.until), "reason": active.reason},
        "locks": [
            {
                "name": lk.name,
                "holder": lk.holder,
                "reason": lk.reason,
                "since": _t(lk.since),
                "expires": _t(lk.expires_at(cfg.locks.default_ttl_s, cfg.locks.max_ttl_s)),
                "stale": lk in stale,
            }
            for lk in found
        ],
        "locked": bool(valid),
        "windows": {
            "configured": list(cfg.update_windows),
            "open": win.open,
            "closes_at": _t(win.closes_at),
            "opens_at": _t(win.opens_at if not win.open else schedule.next_open(windows, now)),
        },
        "waiting": None if waiting_rec is None else _waiting(cfg, waiting_rec),
        "trust": trust.running(StateDir(cfg.state_dir), running, now),  # signed bundles
        "interrupted": None if journal is None else dataclasses.asdict(journal),
        "set_aside": [{"name": a.path, "kind": a.kind, "at": _t(a.at)} for a in seen.set_aside],
        "strays": [{"name": name, "why": why} for name, why in seen.strays],
        "services": svc,
        "health": fit.as_view(),
        "timer": {k: v for k, v in timer.items() if k != "last_tick_at"},
        "history": [_entry(e) for e in reversed(led.history)],  # newest first
    }


def run(cfg: Config, *, as_json: bool) -> int:
    """Print the status; its exit status (``core.commands.status.EXIT_STATUS``)."""
    body = view(cfg)
    print(
        json.dumps(body, indent=2) if as_json else status.table(body), end="\n" if as_json else ""
    )
    return int(body["exit_status"])
