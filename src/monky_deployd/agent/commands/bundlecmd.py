"""``monky-deployd bundle``: sign, verify and check bundles for the release pipeline (contract
v1.3; ``check``: a box's whole admission, offline, in ``agent.commands.bundlecheck``).

    bundle sign --env E --revision R --key FILE|- [--release-version N (--expires T |
                --valid-for 14d)] [BUNDLE|-]
        the bundle JSON on stdout with this key's signature appended (one signature per key:
        a key's earlier one is replaced); ``release`` set first when asked
    bundle verify --env E --revision R [--public-key B64 ...] [--threshold N] [-c CONFIG]
                [BUNDLE|-]
        the box's own check (signatures, threshold, expiry) against the given keys, or
        config.yaml's ``trust``: exit 0 trusted, 5 refused
    bundle public-key --key FILE|-
        the key's public half as ``trust.keys`` takes it, and its keyid
    bundle check [-c CONFIG | --policy FILE] [--trust FILE] [--env E] [--revision R]
                 [--format text|json] BUNDLE|-
        the box's admission run offline: exit 0 admitted, 5 refused

The private key comes from a file or stdin (``-``), never from the command line; the bundle
then comes from a file. Exit 2 for a usage fault (a key or bundle that cannot be read).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from monky_deployd.agent.commands.bundlefile import Usage, read_bundle, read_input
from monky_deployd.core.errors import EXIT_CONFIG, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from monky_deployd.core.faults import ConfigError, DeployError

# the parser is built on every run (a tick's too): everything else loads when ``bundle`` runs


def main(args: argparse.Namespace) -> int:
    try:
        if args.action == "public-key":
            return _public_key(args)
        if args.action == "check":
            from monky_deployd.agent.commands import bundlecheck

            return bundlecheck.main(args)
        if args.action == "sign":
            return _sign(args)
        return _verify(args)
    except Usage as exc:
        print(f"monky-deployd bundle {args.action}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return EXIT_CONFIG


def _key(args: argparse.Namespace) -> Any:
    from monky_deployd.adapters import signatures

    if args.key == "-" and getattr(args, "bundle", None) == "-":
        raise Usage("the key comes from stdin: give the bundle as a file")
    try:
        return signatures.private_key(read_input(args.key, "key"))
    except signatures.KeyUnreadable as exc:
        raise Usage(f"the key {args.key}: {exc}") from None


def _public_key(args: argparse.Namespace) -> int:
    import base64

    from monky_deployd.adapters import signatures
    from monky_deployd.core.signing.trustcfg import keyid

    raw = signatures.public_raw(_key(args))
    print(f"{base64.b64encode(raw).decode()}  keyid {keyid(raw)}")
    return EXIT_OK


def _sign(args: argparse.Namespace) -> int:
    import base64
    import json

    from monky_deployd.adapters import signatures
    from monky_deployd.core.signing import trust
    from monky_deployd.core.signing.trustcfg import keyid

    key = _key(args)
    bundle = read_bundle(args.bundle)
    if args.release_version is not None or args.expires or args.valid_for:
        bundle = _with_release(bundle, args)
    if "release" not in bundle:
        raise Usage("the bundle has no release: give --release-version and --valid-for")
    trust.release(args.revision, bundle)  # malformed: refused here, not on every box
    public = signatures.public_raw(key)
    try:
        message = signatures.canonical(trust.payload(args.env, args.revision, bundle))
    except ValueError as exc:
        raise Usage(f"the bundle cannot be canonicalized (RFC 8785): {exc}") from None
    mine = keyid(public)
    sig = base64.b64encode(signatures.sign(key, message)).decode()
    present = bundle.get("signatures", [])
    if not isinstance(present, list) or not all(isinstance(s, dict) for s in present):
        raise Usage("the bundle's signatures are not a list of {keyid, sig} objects")
    others = [s for s in present if s.get("keyid") != mine]
    bundle["signatures"] = [*others, {"keyid": mine, "sig": sig}]
    print(json.dumps(bundle, indent=2, ensure_ascii=False))
    return EXIT_OK


def _with_release(bundle: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import time

    from monky_deployd.core.lifecycle import gates
    from monky_deployd.core.records.tickrecord import rfc3339

    if bundle.get("signatures"):
        raise Usage("the bundle is signed already: its release cannot change under them")
    if args.release_version is None or not (args.expires or args.valid_for):
        raise Usage("--release-version needs --expires or --valid-for, and they need it")
    try:
        expires = args.expires or rfc3339(
            time.time() + gates.parse_duration(args.valid_for), "seconds"
        )
    except ValueError as exc:
        raise Usage(str(exc)) from None
    return {**bundle, "release": {"version": args.release_version, "expires": expires}}


def _verify(args: argparse.Namespace) -> int:
    import time

    from monky_deployd.agent.apply import trust as performed
    from monky_deployd.core.signing import trust
    from monky_deployd.core.signing.trustcfg import TrustCfg

    bundle = read_bundle(args.bundle)
    if args.public_key:
        try:
            rule = TrustCfg(keys=args.public_key, threshold=args.threshold, accept_unsigned=False)
        except ValueError as exc:
            raise Usage(f"--public-key/--threshold: {exc}") from None
    else:
        from monky_deployd.config import load

        rule = load(args.config).trust
    valid: frozenset[str] = frozenset()
    notes: list[str] = []
    if rule.keys and not trust.is_unsigned(bundle):
        valid, notes = performed.tally(args.env, args.revision, bundle, rule.trusted)
    try:
        verdict = trust.judge(
            revision=args.revision,
            rule=rule,
            bundle=bundle,
            valid=valid,
            notes=notes,
            now=time.time(),
            floor=None,
        )
    except DeployError as err:
        print(str(err))
        for line in err.detail.splitlines():
            print(f"  {line}")
        return EXIT_REFUSED
    if isinstance(verdict, trust.Verified):
        rel = verdict.release
        print(
            f"OK: revision {args.revision} release {rel.version} is signed by "
            f"{len(verdict.keyids)} trusted key(s) (threshold {rule.threshold}), valid until "
            f"{rel.expires_text}"
        )
    else:
        print(f"OK (not verified): {verdict.why}")
    for line in notes:
        print(f"  {line}")
    return EXIT_OK
