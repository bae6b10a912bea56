"""Publish: the finished tick record fans out, once, in this order, through ``Publisher.publish``:

    report    to tenancy, when the tick attempted an apply or a restore (``rec.reportable``);
              masked with every secret the tick learnt; an undelivered one goes to the outbox
              (``keep_report``) and a later tick delivers it (``deliver_outbox``)
    ledger    the tick's line in ledger.json, then the metrics textfile (``agent.tick.ledger``)
    summary   the journal's last line of the tick (outcome, code, revision, duration)

A fault in any of them is a warning: the deploy's outcome stands (contract: "a report that
cannot be delivered is not a reason to fail or repeat the deploy").
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from monky_deployd.adapters import deadline
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.agent import logs
from monky_deployd.agent.tick import ledger
from monky_deployd.config import Config
from monky_deployd.core.faults import DeployError
from monky_deployd.core.records import tickrecord as report
from monky_deployd.core.records.tickrecord import PhaseTiming, TickRecord

log = logging.getLogger("monky_deployd")


@dataclass
class Channel:
    """Where the report goes: tenancy with the token the tick holds now (the tick updates
    ``token`` when it obtains a new one) and the tick's masker (``masker()``: it grows)."""

    state: StateDir
    tenancy: Tenancy
    token: str


class Publisher:
    """The one way out of a tick: ``publish(rec, duration_ms)`` once its record is final."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.channel: Channel | None = None  # set once the tick holds a token

    def publish(self, rec: TickRecord, duration_ms: int) -> None:
        if rec.reportable and self.channel is not None:
            send_report(self.channel, rec)
        ledger.record(self.cfg, rec, duration_ms)  # ledger + metrics textfile
        summary(rec, duration_ms)


def send_report(channel: Channel, rec: TickRecord) -> None:
    """POST the report; kept in the outbox when tenancy does not take it."""
    started = time.monotonic()
    ok = True
    body = report.masked(report.body(rec), logs.masker())  # the free text only
    try:
        # a tick past its deadline still tells tenancy, within one request's deadline
        with logs.phase("report"), deadline.without_tick():
            channel.tenancy.report(channel.token, body)
    except DeployError as err:
        ok = False
        log.warning(
            f"report not delivered (the deploy outcome stands); kept for a later tick: {err}",
            extra={"event": "report.failed", "phase": "report", "code": err.code},
        )
        keep_report(channel.state, rec, body)
    rec.phases.append(PhaseTiming("report", ok, int((time.monotonic() - started) * 1000)))


def summary(rec: TickRecord, duration_ms: int) -> None:
    """The tick's last journal line."""
    level = {
        "applied": logging.INFO,
        "noop": logging.INFO,
        "idle": logging.INFO,
        "waiting": logging.INFO,
    }.get(rec.outcome, logging.WARNING if rec.outcome == "held" else logging.ERROR)
    log.log(
        level,
        f"tick {rec.outcome}: {rec.message}",
        extra={
            "event": "tick.summary",
            "phase": "summary",
            "outcome": rec.outcome,
            "code": rec.code,
            "revision": rec.revision,
            "duration_ms": duration_ms,
        },
    )


# -- the report outbox ----------------------------------------------------------------------------


def keep_report(state: StateDir, rec: TickRecord, body: dict[str, Any]) -> None:
    """An undelivered report (already masked) goes to the bounded outbox for a later tick (its
    place in the order is a sequence number, not the clock: ``adapters.box.state.outbox``)."""
    try:
        state.outbox_put(rec.tick_id, json.dumps(body).encode())
    except DeployError as err:
        log.warning(
            f"the undelivered report could not be kept: {err}",
            extra={"event": "report.lost", "phase": "report", "code": err.code},
        )


def deliver_outbox(state: StateDir, tenancy: Tenancy, token: str) -> None:
    """Reports earlier ticks could not deliver, oldest first, each with its own tick_id, once:
    removed when tenancy took it, or refused it for good (``ReportRefused``: a 4xx other than
    401/429, with a warning); any other failure leaves the rest for later. What is not a
    report the agent kept is set aside by ``state.outbox()``, never read or posted."""
    from monky_deployd.adapters.box.state import outbox
    from monky_deployd.adapters.net.tenancy import ReportRefused

    kept = state.outbox()
    for path in kept:
        try:
            body = json.loads(outbox.read(path))
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:  # fsread.BadEntry too: never its content
            log.warning(
                f"dropped the kept report {path.name}: it is not one ({type(exc).__name__})",
                extra={"event": "outbox.dropped", "phase": "report"},
            )
            outbox.drop(path, state.aside_dir)
            continue
        try:
            with logs.phase("report"):
                tenancy.report(token, body)
        except ReportRefused as err:
            log.warning(
                f"dropped the kept report of tick {body.get('tick_id')}: tenancy refused it "
                f"for good ({err})",
                extra={"event": "outbox.dropped", "phase": "report", "code": err.code},
            )
            outbox.drop(path, state.aside_dir)
            continue
        except DeployError as err:
            log.warning(
                f"{len(kept)} kept report(s) still not delivered: {err}",
                extra={"event": "outbox.failed", "phase": "report", "code": err.code},
            )
            return
        outbox.drop(path, state.aside_dir)
        log.info(
            f"delivered the kept report of tick {body.get('tick_id')}",
            extra={"event": "outbox.delivered", "phase": "report"},
        )
