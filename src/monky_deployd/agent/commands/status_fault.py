"""``monky-deployd status`` when there is no verdict to make: config.yaml missing or invalid
(``config_error``, exit 3), or the state dir unreadable by this user (``unreadable``, exit 15).

Printed in status's own forms, never as a tick's log lines: the table's ``state`` row, or with
``--json`` an object of the same schema (``schema``, ``state``, ``exit_status``, ``reason``,
``now``) plus ``error`` (``code``, ``message``, ``hint``); OPERATIONS.md, "Status".
"""

from __future__ import annotations

import json
import time

from monky_deployd.core.commands import status
from monky_deployd.core.commands.checks import one_line
from monky_deployd.core.faults import DeployError
from monky_deployd.core.records.tickrecord import rfc3339

SCHEMA = 1  # agent/commands/status.py's


def body(state: str, err: DeployError, now: float | None = None) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "state": state,
        "exit_status": status.EXIT_STATUS[state],
        "reason": one_line(str(err)),
        "now": rfc3339(time.time() if now is None else now, "seconds"),
        "error": {"code": str(err.code), "message": err.message, "hint": err.hint},
    }


def run(state: str, err: DeployError, *, as_json: bool) -> int:
    """Print status's answer for ``err``; its exit status."""
    found = body(state, err)
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        print(f"state  {state} (exit {found['exit_status']}): {found['reason']}")
    return status.EXIT_STATUS[state]
