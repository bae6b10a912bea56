"""``monky-deployd``'s command line: the parser, each command's help and exit statuses, and where
config.yaml is (``-c FILE`` > ``$MONKY_DEPLOYD_CONFIG`` > /etc/monky-deployd/config.yaml).

The global options (``-c/--config``, ``--debug``, ``--log-format``) are taken before or after the
command (``monky-deployd -c F status`` is ``monky-deployd status -c F``): each subparser repeats
them with ``default=SUPPRESS``, so a value given before the command is not reset by the
subparser's default, and one given after it wins. Every command and sub-action has its own help
(``lock list --help`` is not ``lock --help``) ending with an ``Exit status:`` section
(tests/e2e/test_cli_args.py walks the parser and holds each to it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import textwrap
from collections.abc import Iterator, Mapping
from itertools import pairwise
from pathlib import Path

from monky_deployd import __version__
from monky_deployd.agent.logs import FORMATS as LOG_FORMATS
from monky_deployd.config import DEFAULT_CONFIG_PATH

CONFIG_ENV = "MONKY_DEPLOYD_CONFIG"

_TICK_EXITS = """\
  0  the box is at the desired revision (applied now, already, or restored), or
     tenancy names no desired state yet
  1  the deploy failed: tried and failed, or a service could not be reached
  2  usage error (bad command line)
  3  config.yaml missing, unreadable or invalid
  4  another tick holds the lock
  5  refused before touching containers (bundle, secret, disk, credential,
     identity, token)
  6  the apply was skipped: the desired revision is held (rolled back) or backs
     off, an update lock is in force, or applies are suspended
  7  a new revision waits on purpose: outside every update window, or before this
     box's place in the rollout spread"""

_CONFIG_EXIT = "  3  config.yaml missing, unreadable or invalid"
_USAGE_EXIT = "  2  usage error (bad command line)"

EXITS: dict[str, str] = {
    "apply": _TICK_EXITS,
    "status": """\
  0  ok: at the desired revision on the last tick, every long-running service
     running and healthy now
  1  failed: the last tick failed or was refused
  2  usage error (bad command line)
  3  config_error: config.yaml missing, unreadable or invalid (--json: its schema,
     "state": "config_error")
  6  held: the desired revision failed here (rolled back and held, or backing off)
  7  stalled: a revision failed and its rollback failed too
  8  no_tick: no tick is recorded (a fresh box, or the ledger was lost)
  9  paused: applies are suspended, or an update lock stops the apply
 10  stale: the last recorded tick is older than 600 s (is the timer running?)
 11  waiting: a new revision waits for an update window or the rollout spread
 12  clock_suspect: the last recorded tick ended in the future
 13  degraded: a long-running service is not running, or unhealthy
 14  not_applied: tenancy names a revision the box does not run (nothing above
     says why)
 15  unreadable: the state dir cannot be read by this user, or holds entries
     monky-deployd does not own (the entries and the chown that mends them)""",
    "doctor": """\
  0  every check OK
  1  a warning (WARN) and no failure
  2  a check failed (FAIL); also a usage error (bad command line)
  config.yaml missing or invalid is the `config` check's FAIL (exit 2)""",
    "plan": f"""\
  0  no change: the next apply would change nothing
  1  changes: the next apply would change the box (the diff is printed)
  2  the plan could not be made (the error is printed); also a usage error
{_CONFIG_EXIT} (--json: its schema with "error")""",
    "suspend": f"""\
  0  suspended
  1  the state dir cannot be written
  2  usage error: a bad command line, or a --for that does not parse
{_CONFIG_EXIT}""",
    "resume": f"""\
  0  resumed (also when nothing was suspended)
  1  the state dir cannot be written
{_USAGE_EXIT}
{_CONFIG_EXIT}""",
    "lock": f"""\
  0  the action was done (see each action's --help)
{_USAGE_EXIT}
{_CONFIG_EXIT}""",
    "lock list": f"""\
  0  the locks were listed (a JSON list on stdout, [] when none)
  1  the lock directory cannot be read
{_USAGE_EXIT}
{_CONFIG_EXIT} (nothing on stdout, one line on stderr)""",
    "lock take": f"""\
  0  the lock is held (its file is printed)
  1  the lock directory cannot be written
  2  usage error: a bad command line, or a --ttl that does not parse or exceeds
     locks.max_ttl_s
{_CONFIG_EXIT}""",
    "lock release": f"""\
  0  released, or it was not held (the line says which)
  1  the lock directory cannot be written
{_USAGE_EXIT}
{_CONFIG_EXIT}""",
    "bundle": f"""\
  0  the action was done (see each action's --help)
{_USAGE_EXIT}""",
    "bundle sign": f"""\
  0  the signed bundle is on stdout
{_USAGE_EXIT}: the key or the bundle cannot be read or is malformed""",
    "bundle verify": f"""\
  0  trusted: the signatures meet the threshold and the release has not expired
{_USAGE_EXIT}: the bundle cannot be read or is malformed
{_CONFIG_EXIT} (without --public-key)
  5  refused, as a box would refuse it (BUNDLE_UNTRUSTED, BUNDLE_EXPIRED, ...)""",
    "bundle public-key": f"""\
  0  the public key (as trust.keys takes it) and its keyid are printed
{_USAGE_EXIT}: the key cannot be read""",
    "bundle check": f"""\
  0  admitted: a box with this policy would apply it (its own facts aside)
  1  the check cannot run here (the docker CLI is missing: COMMAND_NOT_FOUND)
{_USAGE_EXIT}: the bundle, the config.yaml, the --policy or --trust file cannot be read,
     an empty policy:, a --revision that is no revision
  5  refused, as a box would refuse it (every stage that can run: one line per violation:
     code, stage, key, why, the allowance that would permit it, how to write the bundle
     instead)
  --format json: the verdict on stdout for every exit ("verdict", "exit")""",
}

ABOUT: dict[str, str] = {
    "apply": "Run one tick: check in with tenancy and apply the desired bundle (what the "
    "systemd timer runs every 60 s). `apply` alone is one tick; --once is accepted and "
    "means the same.",
    "status": "Where the box is, from local state only (the tick ledger, the records, the "
    "update locks, the engine's containers, the timer): no request to tenancy or OpenBao, "
    "nothing written. Its exit status names the box's state (fits a monitoring check).",
    "doctor": "Live checks of config, grant, Ziti, tenancy, OpenBao, token, secrets, registry, "
    "docker, disk, compose, timer and clock, one line each in debugging order; changes "
    "nothing. On a terminal, a check that waits says what it waits for on stderr.",
    "plan": "Dry run: what the next apply would change and why (compose, .env keys, images, "
    "services); writes nothing, spends no lease.",
    "suspend": "Stop applies (check-ins continue) until `resume`, or for a while (--for).",
    "resume": "Undo `suspend`: applies resume on the next tick.",
    "lock": "The update-lock directory (locks.dir): while a lock is held, a tick pulls but "
    "does not recreate containers.",
    "lock list": "List the update locks as JSON: name, holder, reason, since, expires, stale.",
    "lock take": "Take (or renew) the update lock NAME: no container is recreated while it is "
    "held.",
    "lock release": "Release the update lock NAME.",
    "bundle": "Bundles for the release pipeline (contract v1.3): sign, verify, "
    "public-key, check. A private key comes from a file or stdin (-), never the command line.",
    "bundle sign": "Append this key's signature to a bundle (a key's earlier one is "
    "replaced), setting release.version/expires first when asked; the bundle on stdout.",
    "bundle verify": "Check a bundle's signatures, threshold and expiry as a box would, "
    "against --public-key keys or config.yaml's trust settings.",
    "bundle public-key": "Print a private key's public half as trust.keys takes it, and its keyid.",
    "bundle check": "A box's whole admission of a bundle, run offline before publishing: "
    "signatures (--trust), bundle validation, the image registry, relative binds, the policy "
    "on compose's model (config.yaml's, or --policy's). No secret is read: each .env value is "
    "a placeholder. The box's own facts (the engine's, its links) are judged when it applies.",
}

SHORT: dict[str, str] = {
    "apply": "one tick: check in, apply the desired bundle (what the timer runs)",
    "status": "where the box is, from local state; the exit status names the state",
    "doctor": "live checks, one line each (exit 0 OK, 1 WARN, 2 FAIL)",
    "plan": "dry run: what the next apply would change (exit 0 none, 1 changes)",
    "suspend": "stop applies (check-ins continue)",
    "resume": "undo suspend",
    "lock": "update locks: list, take, release",
    "lock list": "list the update locks (JSON)",
    "lock take": "take the update lock NAME",
    "lock release": "release the update lock NAME",
    "bundle": "sign, verify or check a bundle (release pipeline, v1.3)",
    "bundle sign": "append this key's signature to a bundle",
    "bundle verify": "check a bundle's signatures as a box would",
    "bundle public-key": "the public key and keyid of a private key",
    "bundle check": "a box's admission of a bundle, offline (exit 0 admitted, 5 refused)",
}

EPILOG = f"""\
config.yaml: -c/--config FILE, else ${CONFIG_ENV}, else {DEFAULT_CONFIG_PATH}.
Global options (-c/--config, --debug, --log-format) go before or after the command.
Each command's --help lists its own exit statuses; OPERATIONS.md, "Exit codes" and "Status".

Exit status (the tick's, `apply`):
{_TICK_EXITS}
"""


def _globals(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """-c/--config, --debug, --log-format. On a subparser their default is SUPPRESS: a value
    given before the command survives the subparser (argparse copies a subparser's defaults
    over the namespace)."""

    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument(
        "-c",
        "--config",
        type=Path,
        metavar="FILE",
        default=default(None),
        help=f"config file (default: ${CONFIG_ENV}, else {DEFAULT_CONFIG_PATH})",
    )
    group.add_argument(
        "--debug",
        action="store_true",
        default=default(False),
        help="also log debug lines",
    )
    group.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=default("auto"),
        help="journal: journald's native fields (the default when stdout is the journal); "
        "json: JSON lines for log shippers (the default when stdout is neither the journal "
        "nor a terminal); text: short lines (the default on a terminal)",
    )


def _add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, key: str = ""
) -> argparse.ArgumentParser:
    key = key or name
    parser = sub.add_parser(
        name,
        help=SHORT[key],
        description=textwrap.fill(ABOUT[key], 78),
        epilog=f"Exit status:\n{EXITS[key]}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _globals(parser, top=False)
    return parser


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="monky-deployd",
        description="The monky estate's deploy agent: one tick per run.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=f"monky-deployd {__version__}")
    _globals(top, top=True)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    apply = _add(sub, "apply")
    apply.add_argument("--once", action="store_true", help="one tick (the default; accepted)")
    apply.add_argument(
        "--retry",
        action="store_true",
        help="apply the desired revision now even if it is held (failed and rolled back, or "
        "stalled), waiting for its backoff, outside every update window or before its "
        "rollout place",
    )

    status = _add(sub, "status")
    status.add_argument("--json", action="store_true", help="JSON (schema in OPERATIONS.md)")

    doctor = _add(sub, "doctor")
    doctor.add_argument("--json", action="store_true", help="a JSON list of checks")

    plan = _add(sub, "plan")
    plan.add_argument("--json", action="store_true", help="the diff as JSON (OPERATIONS.md)")
    plan.add_argument(
        "--login",
        action="store_true",
        help="when no usable token is held, log in with the grant (a bootstrap token: no "
        "lease, not stored, revoked at the end)",
    )

    suspend = _add(sub, "suspend")
    suspend.add_argument("--reason", default="", help="why (shown in status and the journal)")
    suspend.add_argument("--for", dest="duration", help="resume by itself after 90s, 30m, 2h, 1d")
    _add(sub, "resume")

    lock = _add(sub, "lock")
    actions = lock.add_subparsers(dest="action", required=True, metavar="ACTION")
    _add(actions, "list", "lock list")
    take = _add(actions, "take", "lock take")
    take.add_argument(
        "name", nargs="?", default="operator", metavar="NAME", help="the lock's name (operator)"
    )
    take.add_argument("--reason", default="", help="why (shown in lock list and the journal)")
    take.add_argument("--ttl", help="ignore the lock after 90s, 30m, 2h, 1d")
    release = _add(actions, "release", "lock release")
    release.add_argument(
        "name", nargs="?", default="operator", metavar="NAME", help="the lock's name (operator)"
    )

    bundle = _add(sub, "bundle")
    acts = bundle.add_subparsers(dest="action", required=True, metavar="ACTION")
    _bundle_arguments(
        _add(acts, "sign", "bundle sign"),
        _add(acts, "verify", "bundle verify"),
        _add(acts, "public-key", "bundle public-key"),
        _add(acts, "check", "bundle check"),
    )
    return top


def config_path(given: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """Where config.yaml is: the flag, else ``$MONKY_DEPLOYD_CONFIG`` (when not empty), else the
    default."""
    env = os.environ if environ is None else environ
    if given is not None:
        return given
    named = env.get(CONFIG_ENV, "")
    return Path(named) if named else DEFAULT_CONFIG_PATH


def parse(argv: list[str] | None, environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """The command line (exits 2 on a usage error, 0 after --help); ``config`` resolved
    (``config_named``: by the flag or ``$MONKY_DEPLOYD_CONFIG``, not the default). ``bundle
    check --format json`` refused by the parser: its JSON verdict on stdout too."""
    words = sys.argv[1:] if argv is None else list(argv)
    if not _json_check(words):
        args = parser().parse_args(argv)
    else:
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                args = parser().parse_args(argv)
        except SystemExit as exc:
            sys.stderr.write(said.getvalue())
            if exc.code == 2:
                from monky_deployd.agent.commands.bundleverdict import emit, usage_json

                lines = said.getvalue().strip().splitlines()
                said_last = lines[-1] if lines else "the command line is not valid"
                emit(usage_json(BUNDLE_CHECK_REVISION, said_last))
            raise
        sys.stderr.write(said.getvalue())
    env = os.environ if environ is None else environ
    args.config_named = args.config is not None or bool(env.get(CONFIG_ENV, ""))
    args.config = config_path(args.config, environ)
    return args


def _json_check(words: list[str]) -> bool:
    """``bundle check`` asked for a JSON verdict (a pipeline step reads stdout as JSON)."""
    asked = "--format=json" in words or ("--format", "json") in set(pairwise(words))
    return asked and "bundle" in words and "check" in words


def commands(top: argparse.ArgumentParser | None = None) -> Iterator[tuple[str, ...]]:
    """Every command and sub-action as its words (("status",), ("lock", "list"), ...)."""

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield (*path, name)
                    yield from walk(child, (*path, name))

    yield from walk(top or parser(), ())


def _bundle_arguments(
    sign: argparse.ArgumentParser,
    verify: argparse.ArgumentParser,
    public_key: argparse.ArgumentParser,
    check: argparse.ArgumentParser | None = None,
) -> None:
    """The ``bundle`` actions' own arguments, on the parsers ``cliargs`` makes (each with the
    global options; ``verify`` reads the trust settings of ``-c/--config``'s config.yaml when
    no ``--public-key`` is given)."""
    for p in (sign, verify):
        p.add_argument("--env", required=True, help="the environment id the bundle is for")
        p.add_argument("--revision", required=True, help="the revision it is published as")
        p.add_argument("bundle", nargs="?", default="-", help="the bundle JSON file (- stdin)")
    sign.add_argument("--key", required=True, help="the Ed25519 private key file, - for stdin")
    sign.add_argument("--release-version", type=int, help="set release.version first")
    when = sign.add_mutually_exclusive_group()
    when.add_argument("--expires", help="release.expires (RFC 3339)")
    when.add_argument("--valid-for", help="release.expires this long from now (14d, 36h)")
    verify.add_argument(
        "--public-key", action="append", default=[], help="a trusted key (base64); repeat"
    )
    verify.add_argument("--threshold", type=int, default=1, help="with --public-key")
    public_key.add_argument(
        "--key", required=True, help="the Ed25519 private key file, - for stdin"
    )
    if check is not None:
        _bundle_check_arguments(check)


# the revision a bundle is checked as when --revision names none (the signatures cover it)
BUNDLE_CHECK_REVISION = "bundle-check"


def _bundle_check_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument("bundle", help="the bundle JSON file (- stdin), as tenancy would send it")
    check.add_argument(
        "--policy",
        type=Path,
        help="a YAML file holding a policy: section (config.yaml's); with -c/--config (or "
        "$MONKY_DEPLOYD_CONFIG) it replaces that config.yaml's policy: and keeps the rest; "
        "without it, -c/--config's config.yaml",
    )
    check.add_argument(
        "--trust",
        type=Path,
        help="a YAML file holding a trust: section (config.yaml's): verify the signatures too",
    )
    check.add_argument(
        "--env", help="the environment id (the signatures cover it; default config.yaml's)"
    )
    check.add_argument(
        "--revision", default=BUNDLE_CHECK_REVISION, help="the revision it will be published as"
    )
    check.add_argument("--format", choices=("text", "json"), default="text", help="output")
