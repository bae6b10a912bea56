"""A fleet on a simulated clock: N boxes, each a systemd timer starting one tick 60 s after the
previous one ended plus a randomized delay, driving the agent's OWN decision code against a
model of tenancy and OpenBao (issue 15).

    .venv/bin/python bench/fleet.py [--boxes 10000] [--delay 10] [--outage stall|refused|none]
    .venv/bin/python bench/fleet.py --publish [--spread 0 600 3600]   (issue 23, below)

What is the agent's and what is modelled:
- per tick, the token phase is ``core.records.token_plan.decide`` stepped exactly as ``TokenKeeper``
  steps it (lookup-self, renew-self, login, lease/rotate, a 429's ``lease_not_before``; a failed
  lease request carries on with the working token), then the check-in, then
  ``core.lifecycle.decide.decide`` on the answer (304 -> Noop). A rotation revokes the old lease
  (one more OpenBao request).
- the timer, read from packaging/systemd/monky-deployd.timer: ``OnUnitInactiveSec=`` after the
  tick ended, plus a delay uniform in [0, ``RandomizedDelaySec=``) drawn anew each time
  (``--delay 10 20`` compares other values; AccuracySec=1s is ignored).
- tick durations: drawn from measured no-op ticks (``--durations FILE``: a JSON list of wall ms,
  e.g. ``bench/noop_tick.py --save-walls FILE``; default: the sample below, measured on a
  loaded 2-core machine).
- tenancy: check-in 304; leases at most 5 per environment per rolling hour (429 with
  ``retry_after_s`` beyond it), TTL 24 h, renewable, OpenBao caps a token at ``--max-ttl-h``
  (default 7 days). One box per environment unless ``--boxes-per-env``. Boxes start in the
  steady state: a lease with 6-24 h left, created up to the max TTL ago; ``--cold``: no token
  (a fleet installed at once), with ``--boxes-per-env 10`` the lease budget is contended.
- the outage (``--outage``): tenancy is down from minute 15 for 10 minutes. ``refused``: a
  request fails at once; ``stall``: a request hangs until the client's read timeout
  (``tenancy.timeout_s``, 15 s) or until tenancy is back, whichever is first (then answered:
  the worst case for a herd). OpenBao stays up.

Rates are requests per second to tenancy and to OpenBao together, counted in 1 s buckets;
"10 s" figures are 10 s windows divided by 10. Steady state: minutes 5-15; after the outage:
minutes 25-40; the herd is the peak after recovery / the steady mean.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, replace
from pathlib import Path

from monky_deployd.core.lifecycle import decide, facts, plans, schedule
from monky_deployd.core.lifecycle.services import ServiceState
from monky_deployd.core.records import token_plan

# Wall ms of 21 no-op ticks as whole processes (bench/noop_tick.py --save-walls, 2026-12-03 07:45,
# load average 4.3 on 2 shared cores: a quiet box's ticks are shorter).
MEASURED_MS = [
    475.2, 502.0, 672.6, 926.5, 719.2, 694.3, 972.6, 1091.8, 811.0, 819.0, 574.6, 957.3, 534.6,
    656.5, 1008.5, 574.8, 985.0, 806.0, 832.5, 515.4, 780.2,
]  # fmt: skip

TIMER = Path(__file__).resolve().parents[1] / "packaging/systemd/monky-deployd.timer"


def timer_seconds(key: str) -> float:
    """``key=Ns`` from the packaged timer unit (the cadence and the randomized delay)."""
    for line in TIMER.read_text().splitlines():
        if line.startswith(f"{key}="):
            return float(line.split("=", 1)[1].removesuffix("s"))
    raise SystemExit(f"{TIMER} has no {key}=")


CADENCE_S = timer_seconds("OnUnitInactiveSec")
MIN, HOUR = 60.0, 3600.0
LEASE_TTL = 86400
BUDGET, BUDGET_WINDOW = 5, HOUR
TIMEOUT_S = 15.0  # tenancy.timeout_s: a stalled request's read timeout
MIN_TTL_S, RENEW_BELOW_S = 600, 6 * 3600  # config.TokenCfg defaults
OUTAGE_AT, OUTAGE_FOR = 15 * MIN, 10 * MIN
STEADY = (5 * MIN, 15 * MIN)
AFTER = (25 * MIN, 40 * MIN)
END = 40 * MIN
APPLIED = facts.AppliedFacts("r1", "shop", ("web",))
RUNNING = (ServiceState("web", "running", "", "img"),)


@dataclass
class Token:  # what OpenBao knows of a box's token
    expires_at: float
    max_at: float
    renewable: bool = True


@dataclass
class Box:
    env: int
    token: Token | None
    known: token_plan.Known | None
    lease_not_before: float | None = None


class Model:
    def __init__(self, args: argparse.Namespace, rng: random.Random) -> None:
        self.args, self.rng = args, rng
        self.requests: Counter[int] = Counter()  # second -> tenancy + OpenBao requests
        self.leases: defaultdict[int, deque[float]] = defaultdict(deque)  # env -> mint times
        self.lease_counts: Counter[tuple[int, int]] = Counter()  # (env, hour) -> leases
        self.counts: Counter[str] = Counter()

    def hit(self, at: float, what: str) -> None:
        self.requests[int(at)] += 1
        self.counts[what] += 1

    def tenancy_down(self, at: float) -> bool:
        return self.args.outage != "none" and OUTAGE_AT <= at < OUTAGE_AT + OUTAGE_FOR

    def tenancy_wait(self, at: float) -> tuple[bool, float]:
        """(answered, seconds the request took) for a tenancy request sent at ``at``."""
        if not self.tenancy_down(at):
            return True, 0.0
        if self.args.outage == "refused":
            return False, 0.0
        back = OUTAGE_AT + OUTAGE_FOR
        return (back - at <= TIMEOUT_S), min(TIMEOUT_S, back - at)

    def lease(self, box: Box, at: float) -> float | None:
        """A lease mint at tenancy: the token's expiry, or None when rate limited (the box's
        ``lease_not_before`` is set as a 429's retry_after_s says)."""
        q = self.leases[box.env]
        while q and q[0] <= at - BUDGET_WINDOW:
            q.popleft()
        if len(q) >= BUDGET:
            box.lease_not_before = q[0] + BUDGET_WINDOW
            self.counts["tenancy.lease 429"] += 1
            return None
        q.append(at)
        self.lease_counts[(box.env, int(at // HOUR))] += 1
        return at + LEASE_TTL


def token_phase(m: Model, box: Box, now: float) -> tuple[bool, float]:
    """``token_plan.decide`` stepped as ``TokenKeeper._round`` steps it. (usable, seconds)."""
    spent = 0.0
    f = token_plan.TokenFacts(
        now=now,
        held=replace(box.known, verified=False) if box.known else None,
        lease_not_before=box.lease_not_before,
        min_ttl_s=MIN_TTL_S,
        renew_below_s=RENEW_BELOW_S,
    )
    for _ in range(12):
        step = token_plan.decide(f)
        if step is token_plan.Step.USE:
            return True, spent
        if step in (token_plan.Step.REFUSE_RATE_LIMITED, token_plan.Step.REFUSE_NO_TOKEN):
            return False, spent
        t = now + spent
        if step is token_plan.Step.LOOKUP:
            m.hit(t, "bao.lookup")
            tok = box.token
            if tok is None or tok.expires_at <= t:
                box.token = box.known = None
                f = replace(f, held=None)
            else:
                assert f.held is not None
                box.known = replace(f.held, expires_at=tok.expires_at, verified=True)
                f = replace(f, held=box.known)
        elif step is token_plan.Step.RENEW:
            m.hit(t, "bao.renew")
            tok, f = box.token, replace(f, renew_tried=True)
            assert tok is not None and f.held is not None
            tok.expires_at = min(t + LEASE_TTL, tok.max_at)
            box.known = replace(f.held, expires_at=tok.expires_at)
            f = replace(f, held=box.known)
        elif step is token_plan.Step.LOGIN:
            m.hit(t, "bao.login")
            box.token = Token(t + 900, t + 900, renewable=False)
            box.known = token_plan.Known("bootstrap", t + 900, False, True)
            f = replace(f, held=box.known, login_done=True)
        else:  # ROTATE / LEASE_WITH_BOOTSTRAP
            f = replace(f, lease_tried=True)
            m.hit(t, "tenancy.lease")
            answered, took = m.tenancy_wait(t)
            spent += took
            if not answered:
                continue  # lease failed: carry on with the working token (token.py)
            expires = m.lease(box, t + took)
            if expires is None:
                f = replace(f, lease_not_before=box.lease_not_before)
                continue
            if step is token_plan.Step.ROTATE:
                m.hit(t, "bao.revoke")
            box.token = Token(expires, t + m.args.max_ttl_h * HOUR)
            box.known = token_plan.Known("lease", expires, True, True, LEASE_TTL)
            f = replace(f, held=box.known)
        spent += 0.01
    return False, spent


def tick(m: Model, box: Box, start: float, duration: float) -> float:
    """One tick at ``start``; returns when it ended."""
    usable, spent = token_phase(m, box, start)
    if not usable:
        m.counts["tick refused: no token"] += 1
        return start + spent + duration
    at = start + spent + duration / 2
    m.hit(at, "tenancy.checkin")
    answered, took = m.tenancy_wait(at)
    if not answered:
        return at + took + duration / 2  # TENANCY_UNREACHABLE: the tick fails, exit 1
    decided = decide.decide(facts.Facts(304, None, APPLIED, RUNNING, now=at))
    assert isinstance(decided, decide.Noop)
    return start + spent + took + duration


def run(args: argparse.Namespace, durations: list[float]) -> Model:
    rng = random.Random(args.seed)
    m = Model(args, rng)
    boxes: list[Box] = []
    for i in range(args.boxes):
        env = i // args.boxes_per_env
        if args.cold:  # installed a minute ago: no token yet
            boxes.append(Box(env, None, None))
            continue
        left = rng.uniform(RENEW_BELOW_S, LEASE_TTL)
        tok = Token(left, rng.uniform(left, args.max_ttl_h * HOUR))
        boxes.append(Box(env, tok, token_plan.Known("lease", left, True, True, LEASE_TTL)))
    # steady state at t=0: each box somewhere in its cycle
    queue = [(rng.uniform(0, CADENCE_S + args.delay), i) for i in range(args.boxes)]
    heapq.heapify(queue)
    while queue:
        start, i = heapq.heappop(queue)
        if start >= END:
            continue
        ended = tick(m, boxes[i], start, rng.choice(durations))
        heapq.heappush(queue, (ended + CADENCE_S + rng.uniform(0, args.delay), i))
    return m


# -- an estate-wide publish (issue 23): one revision for every box, with and without a spread --

# The apply, modelled (seconds): `docker compose pull` of the changed image, `up`, then verify
# until every service ran `verify.stable_s` (30 s, the default) without a restart. A failing
# revision's container exits 1-5 s after `up` (VERIFY_EXITED), the rollback brings the
# last-known-good back from its pinned images (`up` + verify, no pull), then the report goes.
PULL_S = (10.0, 30.0)  # uniform: a base-image layer or two over the estate's links
UP_S = 2.0
STABLE_S = 30.0
EXITS_AFTER_S = (1.0, 5.0)
PUBLISH_BUNDLE = {"project": "shop", "compose": "services: {web: {image: r/web:2}}\n"}


@dataclass
class Publish:
    pulls: Counter[int]  # second -> pulls started at the registry
    ran_at: list[float]  # when each box ran the new revision (verified), good revision
    up_at: list[float]  # when each box's `up` of the new revision ran
    reports: list[float]  # when each box's report reached tenancy
    canaries: int
    decisions: Counter[str]


def publish(
    boxes: int, spread: int, failing: bool, delay: float, durations: list[float], seed: int
) -> Publish:
    """Tenancy publishes r2 to every box at t=0 (``"rollout": {"spread_s": spread}``). Each box
    ticks on its timer (``OnUnitInactiveSec=`` after the last tick ended, plus up to
    ``delay``); every tick from then on is ``core.lifecycle.decide.decide`` on a 200 answer, with
    the box's first sight of r2 (``core.lifecycle.schedule``, as ``agent.observe.pace`` keeps it),
    until it applies."""
    rng = random.Random(seed)
    bundle = {**PUBLISH_BUNDLE, "rollout": {"spread_s": spread}}
    out = Publish(Counter(), [], [], [], 0, Counter())
    seen: dict[int, schedule.Seen] = {}
    queue = [(rng.uniform(0, CADENCE_S + delay), i) for i in range(boxes)]
    heapq.heapify(queue)
    while queue:
        start, i = heapq.heappop(queue)
        at = start + rng.choice(durations) / 2  # the check-in, mid-way through the tick's work
        f = facts.Facts(200, "r2", APPLIED, RUNNING, bundle, now=at, seen=seen.get(i),
                       identity=f"env-{i:05d}")  # fmt: skip
        decided = decide.decide(f)
        out.decisions[decided.kind] += 1
        if isinstance(decided, plans.Waiting):
            g = decided.gate
            seen[i] = schedule.Seen(g.revision, g.first_seen_at, g.until, g.why, g.spread_s)
            ended = at + rng.choice(durations) / 2
            heapq.heappush(queue, (ended + CADENCE_S + rng.uniform(0, delay), i))
            continue
        assert isinstance(decided, plans.Apply)
        out.canaries += bool(decided.gate and decided.gate.canary)
        pull_at = at + 0.2  # bundle, secrets, render, pre-flight
        out.pulls[int(pull_at)] += 1
        up_at = pull_at + rng.uniform(*PULL_S)
        out.up_at.append(up_at)
        if failing:  # exits, rolled back (up + verify of the LKG), reported
            end = up_at + UP_S + rng.uniform(*EXITS_AFTER_S) + UP_S + STABLE_S
        else:
            end = up_at + UP_S + STABLE_S
            out.ran_at.append(end)
        out.reports.append(end + 0.05)
    return out


def publish_table(args: argparse.Namespace, durations: list[float]) -> None:
    delay = args.delay[0]
    print(
        f"estate-wide publish: {args.boxes} boxes, one revision for all at t=0; timer 60 s + "
        f"up to {delay:.0f} s; apply = pull U{PULL_S} s + up {UP_S:.0f} s + verify "
        f"{STABLE_S:.0f} s; a failing revision exits U{EXITS_AFTER_S} s after up, is rolled "
        "back and reported"
    )
    head = (
        f"{'spread_s':>8} | {'peak pulls/s 1s':>15} {'10s':>5} | {'50 %':>6} {'99 %':>6} "
        f"{'100 %':>6} | {'canaries':>8} | {'failing: first report':>21} "
        f"{'boxes up before it':>18} | {'sim s':>5}"
    )
    print(head)
    print("-" * len(head))
    for spread in args.spread:
        t0 = time.perf_counter()
        good = publish(args.boxes, spread, False, delay, durations, args.seed)
        bad = publish(args.boxes, spread, True, delay, durations, args.seed)
        ran = sorted(good.ran_at)
        q = [ran[min(len(ran) - 1, math.ceil(p * len(ran)) - 1)] for p in (0.5, 0.99, 1.0)]
        peak1 = max(good.pulls.values())
        peak10 = max(
            sum(good.pulls[s] for s in range(t, t + 10)) / 10 for t in range(0, int(ran[-1]) + 1)
        )
        first = min(bad.reports)
        exposed = sum(1 for u in bad.up_at if u < first)
        print(
            f"{spread:8d} | {peak1:15d} {peak10:5.1f} | {fmt_s(q[0]):>6} {fmt_s(q[1]):>6} "
            f"{fmt_s(q[2]):>6} | {good.canaries:8d} | {fmt_s(first):>21} {exposed:18d} | "
            f"{time.perf_counter() - t0:5.0f}"
        )
    print(
        "50/99/100 % = time after the publish until that share of boxes runs the revision "
        "(verified); boxes up before it = boxes that had run `up` of the failing revision "
        "when the first failed report reached tenancy"
    )


def fmt_s(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 600 else f"{seconds / 60:.1f}m"


def window(m: Model, lo: float, hi: float, width: int) -> list[float]:
    return [
        sum(m.requests[s] for s in range(t, t + width)) / width
        for t in range(int(lo), int(hi) - width + 1, width)
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--boxes", type=int, default=10_000)
    ap.add_argument("--boxes-per-env", type=int, default=1)
    ap.add_argument(
        "--delay",
        type=float,
        nargs="+",
        default=[timer_seconds("RandomizedDelaySec")],
        help="RandomizedDelaySec values to compare (default: the packaged timer's)",
    )
    ap.add_argument("--outage", choices=("stall", "refused", "none"), nargs="+",
                    default=["stall", "refused"])  # fmt: skip
    ap.add_argument("--max-ttl-h", type=float, default=7 * 24)
    ap.add_argument("--durations", type=Path, help="JSON list of measured tick wall ms")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--cold", action="store_true", help="every box starts without a token")
    ap.add_argument(
        "--publish",
        action="store_true",
        help="an estate-wide publish of one revision instead (issue 23), per --spread",
    )
    ap.add_argument("--spread", type=int, nargs="+", default=[0, 600, 3600])
    args = ap.parse_args()
    ms = json.loads(args.durations.read_text()) if args.durations else MEASURED_MS
    durations = [x / 1000 for x in ms]
    if args.publish:
        publish_table(args, durations)
        return 0
    print(
        f"{args.boxes} boxes, {args.boxes_per_env} per environment; tick durations: median "
        f"{statistics.median(durations):.2f} s of {len(durations)} measured; outage minutes "
        f"15-25; steady = minutes 5-15, after = minutes 25-40; rates in requests/s (tenancy "
        "+ OpenBao)"
    )
    head = (
        f"{'delay':>5} {'outage':>7} | {'mean':>6} {'p99 1s':>6} {'peak 1s':>7} {'peak 10s':>8}"
        f" {'pk/mean':>7} | {'after pk 1s':>11} {'pk 10s':>6} {'herd':>5} | "
        f"{'leases/h/env max':>16} {'over budget':>11} {'sim s':>5}"
    )
    print(head)
    print("-" * len(head))
    for delay in args.delay:
        for outage in args.outage:
            t0 = time.perf_counter()
            run_args = argparse.Namespace(**{**vars(args), "delay": delay, "outage": outage})
            m = run(run_args, durations)
            steady1 = window(m, *STEADY, 1)
            mean = statistics.mean(steady1)
            p99 = statistics.quantiles(steady1, n=100)[-1]
            peak10 = max(window(m, *STEADY, 10))
            after1, after10 = window(m, *AFTER, 1), window(m, *AFTER, 10)
            per_env = max(m.lease_counts.values(), default=0)
            over = sum(1 for v in m.lease_counts.values() if v > BUDGET)
            print(
                f"{delay:5.0f} {outage:>7} | {mean:6.1f} {p99:6.1f} {max(steady1):7.0f} "
                f"{peak10:8.1f} {max(steady1) / mean:7.2f} | {max(after1):11.0f} "
                f"{max(after10):6.1f} {max(after10) / mean:5.2f} | {per_env:16d} {over:11d} "
                f"{time.perf_counter() - t0:5.0f}"
            )
            if args.boxes <= 0 or math.isnan(mean):
                return 1
            if args.cold or args.boxes_per_env > 1:
                print("        " + ", ".join(f"{k} {v}" for k, v in sorted(m.counts.items())))
    print(
        "herd = peak 10 s rate after recovery / steady mean (goal <= 2); pk/mean = steady peak "
        "1 s / mean (goal <= 1.3); leases per environment per clock hour (budget 5)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
