"""``monky-deployd``: the command line.

    apply --once [--retry]              one tick (what the timer runs)
    status [--json]                     where the box is (agent/status.py; its own exit
                                        statuses, OPERATIONS.md "Status")
    doctor [--json]                     live checks, one line each (exit 0 OK, 1 WARN, 2 FAIL)
    plan [--json] [--login]             what the next apply would change; changes nothing
                                        (exit 0 no change, 1 changes, 2 error)
    suspend [--reason R] [--for D]      stop applies (check-ins continue) until resume / D
    resume
    lock list | take NAME | release NAME   the update-lock directory (locks.dir)
    bundle sign | verify | public-key   signed bundles for the release pipeline
                                        (agent/bundlecmd.py; the key from a file or stdin)

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
    7  a new revision waits: outside every update window, or before this box's place in the
       rollout spread; the box runs its last-known-good revision (not a unit failure)
"""

from __future__ import annotations

import argparse
import gc
import getpass
import json
import logging
import sys
import time
from pathlib import Path

from monky_deployd import __version__
from monky_deployd.agent import bundlecmd, logs
from monky_deployd.config import DEFAULT_CONFIG_PATH, Config, load
from monky_deployd.core import gates
from monky_deployd.core.errors import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    EXIT_WAITING,
    Code,
    ConfigError,
    DeployError,
)
from monky_deployd.core.records import Suspended
from monky_deployd.core.report import TickRecord, rfc3339

log = logging.getLogger("monky_deployd")
WRITERS = ("apply", "suspend", "resume")  # the commands that write the state dir


def exit_code(rec: TickRecord) -> int:
    if rec.outcome in ("applied", "noop", "idle"):
        return EXIT_OK
    code = rec.code if isinstance(rec.code, Code) else Code.INTERNAL
    if rec.outcome == "held":
        return EXIT_HELD
    if rec.outcome == "waiting":
        return EXIT_WAITING
    if rec.outcome != code.outcome:  # the raise site knew better than the catalogue
        return EXIT_REFUSED if rec.outcome == "refused" else EXIT_FAILED
    return code.exit_status


def exit_code_of(err: DeployError) -> int:
    return EXIT_REFUSED if err.outcome == "refused" else EXIT_FAILED


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG_PATH,
        help=f"config file (default {DEFAULT_CONFIG_PATH})",
    )


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
    _config_arg(apply)
    apply.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default="auto",
        help="journal: journald's native fields (the default when stdout is the journal); "
        "json: JSON lines for log shippers (the default when stdout is neither the journal "
        "nor a terminal); text: short lines (the default on a terminal)",
    )
    apply.add_argument("--debug", action="store_true", help="also log debug lines")
    apply.add_argument(
        "--retry",
        action="store_true",
        help="apply the desired revision now even if it is held (failed and rolled back, or "
        "stalled), waiting for its backoff, outside every update window or before its "
        "rollout place",
    )
    doctor = sub.add_parser(
        "doctor",
        help="live checks of config, grant, Ziti, services, token, "
        "secrets, registry, disk, docker, timer, clock (exit 0 OK, 1 warnings, 2 a failure)",
    )
    _config_arg(doctor)
    doctor.add_argument("--json", action="store_true", help="a JSON list of checks")
    plan = sub.add_parser(
        "plan",
        help="dry run: what the next apply would change (exit 0 none, 1 changes, 2 error)",
    )
    _config_arg(plan)
    plan.add_argument("--json", action="store_true", help="the diff as JSON (OPERATIONS.md)")
    plan.add_argument(
        "--login",
        action="store_true",
        help="when no usable token is held, log in with the grant (a bootstrap token: no "
        "lease, not stored, revoked at the end)",
    )
    plan.add_argument("--debug", action="store_true", help="log the plan's steps on stderr")
    status = sub.add_parser(
        "status", help="where the box is: revisions, last tick, token, services, history"
    )
    _config_arg(status)
    status.add_argument("--json", action="store_true", help="JSON (schema in OPERATIONS.md)")
    suspend = sub.add_parser("suspend", help="stop applies (check-ins continue)")
    _config_arg(suspend)
    suspend.add_argument("--reason", default="", help="why (shown in status and the journal)")
    suspend.add_argument("--for", dest="duration", help="resume by itself after 90s, 30m, 2h, 1d")
    resume = sub.add_parser("resume", help="undo suspend")
    _config_arg(resume)
    lock = sub.add_parser("lock", help="update locks: pull but do not recreate containers")
    _config_arg(lock)
    lock.add_argument("action", choices=("list", "take", "release"))
    lock.add_argument("name", nargs="?", default="operator", help="the lock's name")
    lock.add_argument("--reason", default="", help="why (take)")
    lock.add_argument("--ttl", help="ignore the lock after 90s, 30m, 2h, 1d (take)")
    bundlecmd.add_parser(sub)  # sign / verify / public-key (signed bundles, contract v1.3)
    return parser


def _operator(args: argparse.Namespace, cfg: Config) -> int:
    """suspend, resume and lock: small reads and writes of the state and lock dirs."""
    from monky_deployd.adapters.box import locks
    from monky_deployd.adapters.box.state import StateDir

    now = time.time()
    state = StateDir(cfg.state_dir)
    if args.command == "suspend":
        until = now + gates.parse_duration(args.duration) if args.duration else None
        state.ensure().write_suspend(Suspended(now, until, args.reason))
        print(f"suspended{' until ' + rfc3339(until, 'seconds') if until else ''}")
    elif args.command == "resume":
        state.clear_suspend()
        print("resumed")
    elif args.command == "lock" and args.action == "take":
        ttl = gates.parse_duration(args.ttl) if args.ttl else None
        if ttl is not None and ttl > cfg.locks.max_ttl_s:
            raise ValueError(
                f"--ttl {ttl:.0f} s is longer than locks.max_ttl_s ({cfg.locks.max_ttl_s:.0f} s): "
                "no lock counts for longer"
            )
        holder = f"{getpass.getuser()} (monky-deployd lock take)"
        print(locks.take(cfg.locks.dir, args.name, holder, args.reason, ttl))
    elif args.command == "lock" and args.action == "release":
        print("released" if locks.release(cfg.locks.dir, args.name) else "not held")
    else:  # lock list
        found = locks.read_locks(cfg.locks.dir)
        _, stale = gates.split_locks(found, now, cfg.locks.default_ttl_s, cfg.locks.max_ttl_s)
        rows = [
            {
                "name": lk.name,
                "holder": lk.holder,
                "reason": lk.reason,
                "since": rfc3339(lk.since, "seconds"),
                "expires": rfc3339(
                    lk.expires_at(cfg.locks.default_ttl_s, cfg.locks.max_ttl_s), "seconds"
                ),
                "stale": lk in stale,
            }
            for lk in found
        ]
        print(json.dumps(rows, indent=2))
    return EXIT_OK


def _plan(args: argparse.Namespace, cfg: Config) -> int:
    """``plan``: the diff on stdout (text or JSON), log lines on stderr (warnings unless
    --debug). Exit 0 no change, 1 changes, 2 error."""
    from monky_deployd.agent.plan import run_plan

    logs.setup("text", logging.DEBUG if args.debug else logging.WARNING, stream=sys.stderr)
    status, found, err = run_plan(cfg, login=args.login)
    if args.json:
        body: dict[str, object] = (
            found.as_json() if found is not None else {"schema": 1, "changes": None}
        )
        body["error"] = (
            None
            if err is None
            else {"code": err.code, "message": err.message, "hint": err.hint}
            | ({"detail": err.detail} if err.detail else {})
        )
        print(json.dumps(body, indent=2))
    else:
        if found is not None:
            print(found.as_text(), end="")
        if err is not None:
            print(f"plan failed: {err}", file=sys.stderr)
            for line in err.detail.splitlines():  # one line per fault (a policy's violations)
                print(f"  {line}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # exits 2 on usage errors
    if args.command == "bundle":  # the release pipeline's: no config.yaml, no tick
        return bundlecmd.main(args)
    if args.command == "doctor":  # loads config.yaml itself: its first check
        from monky_deployd.agent import doctor

        return doctor.main(args.config, as_json=args.json)
    debug = getattr(args, "debug", False)
    logs.setup(getattr(args, "log_format", "auto"), logging.DEBUG if debug else logging.INFO)
    started = time.monotonic()
    try:
        with logs.phase("config"):
            cfg = load(args.config)
    except ConfigError as err:
        from monky_deployd.core.checks import one_line

        log.error(
            str(err),
            extra={"event": "tick.error", "phase": "config", "code": err.code, "hint": err.hint},
        )
        log.error(
            f"tick refused: {one_line(err.message)}",
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
    if args.command == "plan":
        return _plan(args, cfg)
    if args.command in WRITERS:  # root acts as the state dir's owner: no root-owned file left
        from monky_deployd.adapters.box import owner

        if (user := owner.become_owner(cfg.state_dir)) is not None and args.command == "apply":
            log.info(f"running as {user} (the owner of {cfg.state_dir}), not root")
    if args.command != "apply":
        try:
            if args.command == "status":
                from monky_deployd.agent import status

                return status.run(cfg, as_json=args.json)
            return _operator(args, cfg)
        except ValueError as exc:  # a duration that does not parse
            print(f"monky-deployd {args.command}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except DeployError as err:
            print(str(err), file=sys.stderr)
            return exit_code_of(err)
    config_ms = int((time.monotonic() - started) * 1000)
    from monky_deployd.agent.tick import (
        Options,
        run_tick,  # imported after config so a bad config fails fast
    )

    return exit_code(run_tick(cfg, config_ms=config_ms, options=Options(retry=args.retry)))


def run() -> int:
    """The process's entry point (the ``monky-deployd`` script, ``python -m``): ``main``, then
    ``gc.freeze()``. Every run is one short process whose objects all die with it; frozen, they
    are not walked again by the collections the interpreter makes on its way out (about 50 ms
    of a no-op tick's 330 ms of CPU, ``bench/noop_tick.py``). ``main`` itself, called in a
    long-lived process (the tests), leaves the collector alone."""
    try:
        return main()
    finally:
        gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run())
