"""``monky-deployd``: the command line.

Exit codes (documented in OPERATIONS.md):

    0  the box is at the desired revision (applied now or already), or no desired state exists
    1  the deploy failed (tried and failed, or a service could not be reached)
    2  usage error
    3  config.yaml missing, unreadable or invalid
    4  another tick holds the lock
    5  the deploy was refused before touching containers (bad bundle, missing secret, disk,
       credential, token)
    6  the apply was skipped: the desired revision failed here before and is held (rolled
       back) or waits for its backoff; the box runs its last-known-good revision
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from monky_deployd import __version__
from monky_deployd.agent import logs
from monky_deployd.config import DEFAULT_CONFIG_PATH, load
from monky_deployd.core.errors import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_OK,
    EXIT_REFUSED,
    Code,
    ConfigError,
)
from monky_deployd.core.report import TickRecord

log = logging.getLogger("monky_deployd")


def exit_code(rec: TickRecord) -> int:
    if rec.outcome in ("applied", "noop", "idle"):
        return EXIT_OK
    code = rec.code if isinstance(rec.code, Code) else Code.INTERNAL
    if rec.outcome == "held":
        return EXIT_HELD
    if rec.outcome != code.outcome:  # the raise site knew better than the catalogue
        return EXIT_REFUSED if rec.outcome == "refused" else EXIT_FAILED
    return code.exit_status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monky-deployd",
        description="The monky estate's deploy agent: one tick per run.",
    )
    parser.add_argument("--version", action="version", version=f"monky-deployd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    apply = sub.add_parser("apply", help="check in with tenancy and apply the desired bundle")
    apply.add_argument(
        "--once", action="store_true", required=True, help="run one tick and exit (required)"
    )
    apply.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG_PATH,
        help=f"config file (default {DEFAULT_CONFIG_PATH})",
    )
    apply.add_argument(
        "--log-format",
        choices=("auto", "json", "text"),
        default="auto",
        help="json lines (default when stdout is not a terminal) or text",
    )
    apply.add_argument("--debug", action="store_true", help="also log debug lines")
    apply.add_argument(
        "--retry",
        action="store_true",
        help="apply the desired revision now even if it is held (failed and rolled back, or "
        "stalled) or waiting for its backoff",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # exits 2 on usage errors
    logs.setup(args.log_format, logging.DEBUG if args.debug else logging.INFO)
    started = time.monotonic()
    try:
        with logs.phase("config"):
            cfg = load(args.config)
    except ConfigError as err:
        log.error(
            str(err),
            extra={"event": "tick.error", "phase": "config", "code": err.code, "hint": err.hint},
        )
        log.error(
            f"tick refused: {err.message.splitlines()[0]}",
            extra={
                "event": "tick.summary",
                "phase": "summary",
                "outcome": "refused",
                "code": err.code,
                "revision": None,
                "duration_ms": int((time.monotonic() - started) * 1000),
            },
        )
        return EXIT_CONFIG
    config_ms = int((time.monotonic() - started) * 1000)
    from monky_deployd.agent.tick import (
        Options,
        run_tick,  # imported after config so a bad config fails fast
    )

    return exit_code(run_tick(cfg, config_ms=config_ms, options=Options(retry=args.retry)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
