"""What the token phase costs: N whole ticks (``tick.run_tick``) against the loopback fakes, the
fake clock moving ``--interval`` seconds between ticks, in several conditions. Prints, per
scenario, the totals and per-tick rates of: leases minted, lease requests, grant logins,
lookup-self calls, renew-self calls, revoke-self calls (the old lease after a rotation), all
tenancy requests and all OpenBao requests.

    .venv/bin/python bench/token_economy.py [--ticks N] [--interval S] [--scenario NAME ...]
                                            [--trace]   (also one line per tick that spent)

Scenarios (no Docker needed: none of them reaches a container):
  steady        tenancy has no desired state: every tick is token + check-in (idle)
  failing       the desired bundle names a secret OpenBao lacks: every attempt is refused
                (ENV_INCOMPLETE: its secret is absent) and reports; between attempts the
                revision backs off (APPLY_BACKOFF: check-in only, no report)
  rate-limited  other boxes spent the environment's 5 leases just before the first tick
  box-off       like steady, but the box is off for 25 h after the first tick (lease expired)
  rotating      tenancy mints leases that cannot be renewed and the box is off for 19 h after
                the first tick: the next tick rotates the lease and revokes the old one
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from monky_deployd import config
from monky_deployd.agent.tick import tick
from monky_deployd_testkit.fakes.estate import Estate

ROOT = Path(__file__).resolve().parents[1]

ENV = "env-bench-01"
COLUMNS = (
    "leases", "lease_req", "logins", "lookups", "renewals", "revokes", "tenancy_req", "bao_req",
)  # fmt: skip


def failing_bundle() -> dict[str, object]:
    return {
        "project": "shop",
        "compose": "services:\n  web:\n    image: busybox\n",
        "env_template": "A=${A}\n",
        "manifest": [{"name": "A", "path": f"envs/{ENV}/app", "key": "a"}],
    }


def snapshot(est: Estate) -> dict[str, int]:
    return {
        "leases": len(est.tenancy.leases),
        "lease_req": est.tenancy.lease_requests,
        "logins": est.bao.logins,
        "lookups": est.bao.lookups,
        "renewals": est.bao.renewals,
        "revokes": est.bao.revocations,
        "tenancy_req": len(est.tenancy.requests),
        "bao_req": len(est.bao.requests),
    }


def run(
    name: str, ticks: int, interval: float, trace: bool = False
) -> tuple[dict[str, int], Counter[str]]:
    with Estate(env=ENV) as est, tempfile.TemporaryDirectory() as tmp:
        grant = est.write_grant(Path(tmp) / "grant.jwt")
        cfg = config.parse(
            est.config(state_dir=Path(tmp) / "state", grant_file=grant), "bench config"
        )
        setup: dict[str, Callable[[], None]] = {
            "failing": lambda: est.tenancy.set_desired("r1", failing_bundle()),
            "rate-limited": est.spend_lease_budget,
            "rotating": lambda: setattr(est.tenancy, "lease_renewable", False),
        }
        if name in setup:
            setup[name]()
        base = snapshot(est)
        outcomes: Counter[str] = Counter()
        for i in range(ticks):
            before = snapshot(est)
            rec = tick.run_tick(cfg, clock=est.clock.now)
            outcomes[f"{rec.outcome}:{rec.code}"] += 1
            spent = {k: v - before[k] for k, v in snapshot(est).items()}
            if trace and (i == 0 or spent["lease_req"] or spent["logins"] or spent["renewals"]):
                print(f"  tick {i:>5} " + " ".join(f"{k}={v}" for k, v in spent.items() if v))
            off = {"box-off": 25 * 3600, "rotating": 19 * 3600}.get(name, 0)
            est.clock.advance(off if (off and i == 0) else interval)
        after = snapshot(est)
        return {k: after[k] - base[k] for k in after}, outcomes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ticks", type=int, default=180)
    ap.add_argument("--interval", type=float, default=60.0)
    ap.add_argument(
        "--scenario",
        action="append",
        choices=("steady", "failing", "rate-limited", "box-off", "rotating"),
        help="repeatable; default: all",
    )
    ap.add_argument("--trace", action="store_true", help="print the ticks that spent something")
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the agent's JSON lines are not the point here
    names = args.scenario or ["steady", "failing", "rate-limited", "box-off", "rotating"]
    print(f"{args.ticks} ticks per scenario, fake clock +{args.interval:g} s per tick")
    print(f"{'scenario':<13}" + "".join(f"{c:>12}" for c in COLUMNS) + "   outcomes")
    for name in names:
        if args.trace:
            print(f"{name}: ticks that spent something")
        totals, outcomes = run(name, args.ticks, args.interval, args.trace)
        print(f"{name:<13}" + "".join(f"{totals[c]:>12}" for c in COLUMNS), end="")
        print("   " + ", ".join(f"{k} x{v}" for k, v in sorted(outcomes.items())))
        per = "".join(f"{totals[c] / args.ticks:>12.3f}" for c in COLUMNS)
        print(f"{'  per tick':<13}{per}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
