"""``monky-deployd``: the command line.

    apply [--once] [--retry]            one tick (what the timer runs; --once accepted)
    status [--json]                     where the box is (agent/commands/status.py; its own exit
                                        statuses, OPERATIONS.md "Status")
    doctor [--json]                     live checks, one line each (exit 0 OK, 1 WARN, 2 FAIL)
    plan [--json] [--login]             what the next apply would change; changes nothing
                                        (exit 0 no change, 1 changes, 2 error)
    suspend [--reason R] [--for D]      stop applies (check-ins continue) until resume / D
    resume
    lock list | take NAME | release NAME   the update-lock directory (locks.dir)
    bundle sign | verify | public-key   signed bundles for the release pipeline
                                        (agent/commands/bundlecmd.py; the key from a file or stdin)

The parser and each command's help and exit statuses: cliargs.py. Global options
(-c/--config FILE, --debug, --log-format) go before or after the command; config.yaml is
-c FILE, else $MONKY_DEPLOYD_CONFIG, else /etc/monky-deployd/config.yaml.

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

from monky_deployd import cliargs
from monky_deployd.agent import logs
from monky_deployd.config import Config, load
from monky_deployd.core.errors import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    EXIT_WAITING,
    Code,
)
from monky_deployd.core.faults import ConfigError, DeployError
from monky_deployd.core.lifecycle import gates
from monky_deployd.core.records.tickrecord import TickRecord, rfc3339

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


def _operator(args: argparse.Namespace, cfg: Config) -> int:
    """suspend, resume and lock: small reads and writes of the state and lock dirs."""
    from monky_deployd.adapters.box import locks
    from monky_deployd.adapters.box.state.state import StateDir
    from monky_deployd.core.records.suspend import Suspended

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
    from monky_deployd.agent.commands.plan import run_plan

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


def _level(args: argparse.Namespace, quiet: int = logging.INFO) -> int:
    return logging.DEBUG if args.debug else quiet


def _stderr_format(args: argparse.Namespace) -> str:
    """The read-only commands log on stderr for a person: text unless --log-format says."""
    return "text" if args.log_format == "auto" else str(args.log_format)


def _seat(args: argparse.Namespace, err: DeployError) -> DeployError:
    """CONFIG_UNREADABLE with this user's fix (``accounts.config_closed``): an operator (the
    adm group, a login) while config.yaml is as the package sets it is sent to root's seat, not
    to the ownership the file already has; else the chgrp/chmod that lets it read (issue 36)."""
    if err.code is not Code.CONFIG_UNREADABLE:
        return err
    from monky_deployd.adapters import accounts

    action = getattr(args, "action", None)  # `lock list`: the command as typed
    command = f"{args.command} {action}" if action else str(args.command)
    found = accounts.config_closed(args.config, command, err.message)
    return err if found is None else ConfigError(found[0], code=err.code, hint=found[1])


def _config_refused(
    args: argparse.Namespace,
    err: DeployError,
    started: float,
    phase: str = "config",
    status: int = EXIT_CONFIG,
) -> int:
    """A refusal before any tick (exit ``status``): config.yaml missing or invalid (exit 3), or
    a state dir root's command may not act in (``phase`` state, exit 5). apply logs its tick
    lines; status and plan answer in their own form (--json: their schema); the others print
    one line on stderr."""
    err = _seat(args, err)
    if args.command == "status":
        from monky_deployd.agent.commands import status_fault

        return status_fault.run("config_error", err, as_json=args.json)
    if args.command == "plan" and args.json:
        error = {"code": err.code, "message": err.message, "hint": err.hint}
        print(json.dumps({"schema": 1, "changes": None, "error": error}, indent=2))
        return status
    if args.command != "apply":
        print(f"monky-deployd {args.command}: {err}", file=sys.stderr)
        return status
    from monky_deployd.core.commands.checks import one_line

    log.error(
        str(err),
        extra={"event": "tick.error", "phase": phase, "code": err.code, "hint": err.hint},
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
    return status


def main(argv: list[str] | None = None) -> int:
    args = cliargs.parse(argv)  # exits 2 on usage errors; args.config: flag > env > default
    if args.command == "bundle":  # the release pipeline's: no tick
        from monky_deployd.agent.commands import bundlecmd  # (the release pipeline's only)

        return bundlecmd.main(args)
    if args.command == "doctor":  # loads config.yaml itself: its first check
        from monky_deployd.agent.commands import doctor

        return doctor.main(
            args.config,
            as_json=args.json,
            log_format=_stderr_format(args),
            level=_level(args, logging.WARNING),
        )
    if args.command == "plan":  # the diff on stdout, log lines on stderr
        logs.setup(_stderr_format(args), _level(args, logging.WARNING), stream=sys.stderr)
    else:
        logs.setup(args.log_format, _level(args))
    started = time.monotonic()
    try:
        with logs.phase("config"):
            cfg = load(args.config)
    except ConfigError as err:
        return _config_refused(args, err, started)
    if args.command == "plan":
        return _plan(args, cfg)
    if args.command in WRITERS:  # root acts as the state dir's owner: no root-owned file left
        from monky_deployd.adapters.box.state import owner

        try:
            user = owner.become_owner(cfg.state_dir, cfg.service_user)
        except DeployError as err:  # a state dir root may not act in: nothing was run
            return _config_refused(args, err, started, "state", exit_code_of(err))
        if user is not None and args.command == "apply":
            log.info(f"running as {user} (the unit's account, service_user), not root")
    if args.command != "apply":
        try:
            if args.command == "status":
                from monky_deployd.agent.commands import status

                return status.run(cfg, as_json=args.json)
            return _operator(args, cfg)
        except ValueError as exc:  # a duration that does not parse
            print(f"monky-deployd {args.command}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except DeployError as err:
            if args.command == "status":  # the state dir cannot be read by this user
                from monky_deployd.agent.commands import status_fault

                return status_fault.run("unreadable", err, as_json=args.json)
            print(str(err), file=sys.stderr)
            return exit_code_of(err)
    config_ms = int((time.monotonic() - started) * 1000)
    from monky_deployd.agent.context import Options
    from monky_deployd.agent.tick.tick import run_tick

    return exit_code(run_tick(cfg, config_ms=config_ms, options=Options(retry=args.retry)))


def run() -> int:
    """The process's entry point (the ``monky-deployd`` script, ``python -m``): ``main`` with the
    collector off, then ``gc.freeze()``. Every run is one short process whose objects all die
    with it: a no-op tick's modules and its work make next to no cyclic garbage (collecting
    it was 15 M instructions of a no-op, ``bench/noop_instructions.py``; an apply turns the
    collector back on, ``agent.tick.tick``), and frozen, they are not walked again by the
    collections the interpreter makes on its way out (about 50 ms of a no-op tick's 330 ms of
    CPU, ``bench/noop_tick.py``). ``main`` itself, called in a long-lived process (the
    tests), leaves the collector alone."""
    gc.disable()
    try:
        return main()
    finally:
        gc.freeze()
        gc.enable()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run())
