"""A steady-state (no-op) tick as a whole process, against the baseline of importing the agent's
five libraries, interleaved in one run (issue 15's goal: the tick at most 0.8x the baseline's
wall and CPU time, peak RSS at most the baseline's).

    .venv/bin/python bench/noop_tick.py [--runs N] [--src DIR] [--save-walls FILE]

No Docker needed: ``monky_deployd_testkit.steady`` is the box (loopback tenancy answering 304 to
the applied revision, a loopback Engine API listing the project's container as running, the
state an earlier apply left). The first tick spends the lease and is not counted. ``--src DIR``
runs the ticks from another checkout's ``src`` (e.g. ``/path/to/main/src``: before/after);
``--save-walls`` writes the ticks' wall times for ``bench/fleet.py --durations``.
Prints a table: median and p90 wall, median CPU (user+sys), median peak RSS of the baseline, the
floor (the libraries a no-op path needs plus one pydantic model) and the tick, and the floor's
and the tick's ratios to the baseline; then the leases, check-ins and engine calls the counted
ticks made; then where a no-op tick's CPU goes, split in one process (the floor's libraries, the
agent's own modules, the tick's work).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _spawn import Launcher, Row

from monky_deployd_testkit.steady import SteadyBox

BASELINE = (sys.executable, "-c", "import httpx, pydantic, hvac, yaml, pythonjsonlogger")
# The floor of any no-op tick built on the design card's libraries: what its path cannot do
# without (httpx for the check-in, yaml for config.yaml, the JSON log formatter) and ONE pydantic
# model built and validated. The tick can approach this row, not go below it.
FLOOR = (
    sys.executable,
    "-c",
    "import httpx, yaml, pythonjsonlogger.json\n"
    "from pydantic import BaseModel\n"
    "class A(BaseModel):\n    x: int = 0\n"
    "A(x=1)",
)

# The same tick in one process, timed in three parts: the floor's libraries as the floor uses
# them, then the agent's own modules (and what they pull in beyond the floor: httpcore, h11,
# argparse), then the tick itself; with the number of classes those modules build at import.
PHASES = """
import dataclasses, os, sys, time
t0 = time.process_time()
import httpx, yaml, pythonjsonlogger.json
from pydantic import BaseModel
class _A(BaseModel):
    x: int = 0
_A(x=1)
t1 = time.process_time()
import monky_deployd.agent.logs, monky_deployd.agent.tick.tick, monky_deployd.cli as cli
t2 = time.process_time()
own = [m for n, m in list(sys.modules.items()) if n.startswith("monky_deployd.")]
classes = {c for m in own for c in vars(m).values()
           if isinstance(c, type) and c.__module__ == m.__name__}
dcs = sum(dataclasses.is_dataclass(c) and not hasattr(c, "__pydantic_fields__") for c in classes)
models = sum(hasattr(c, "__pydantic_fields__") for c in classes)
sys.argv = ["monky-deployd", *sys.argv[1:]]
try:
    cli.main()
except SystemExit:
    pass
t3 = time.process_time()
os.write(2, ("PHASES %.1f %.1f %.1f %d %d %d\\n" % (1000 * (t1 - t0), 1000 * (t2 - t1),
         1000 * (t3 - t2), len(own), dcs, models)).encode())
"""


def phases(argv: tuple[str, ...], env: dict[str, str], runs: int) -> list[list[float]]:
    """``runs`` in-process splits of a no-op tick (``PHASES``)."""
    found = []
    for _ in range(runs):
        proc = subprocess.run(
            (sys.executable, "-c", PHASES, *argv[3:]),
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        line = [ln for ln in proc.stderr.splitlines() if ln.startswith("PHASES ")]
        if not line:
            raise SystemExit(f"the split tick failed: {proc.stderr[-2000:]}")
        found.append([float(x) for x in line[0].split()[1:]])
    return found


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def stats(rows: list[Row]) -> tuple[float, float, float, float]:
    wall = [r[0] for r in rows]
    return (
        statistics.median(wall),
        p90(wall),
        statistics.median(r[1] for r in rows),
        statistics.median(r[2] for r in rows),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--src", type=Path, help="run the ticks from this src/ instead")
    ap.add_argument("--save-walls", type=Path, help="write the ticks' wall ms here (JSON)")
    args = ap.parse_args()
    load_before = os.getloadavg()
    with (
        Launcher() as launcher,
        tempfile.TemporaryDirectory(prefix="monky-bench-") as tmp,
        SteadyBox(Path(tmp)) as box,
    ):
        env = box.env()
        if args.src:
            env["PYTHONPATH"] = str(args.src.resolve())
        first = subprocess.run(box.argv, env=env, capture_output=True, text=True, check=False)
        if first.returncode != 0:
            print(first.stdout[-2000:], first.stderr[-2000:], file=sys.stderr)
            return 1
        leases = len(box.estate.tenancy.leases)
        base: list[Row] = []
        floor: list[Row] = []
        noop: list[Row] = []
        for _ in range(args.runs):  # interleaved: all see the same machine
            base.append(launcher.run(BASELINE, env))
            floor.append(launcher.run(FLOOR, env))
            noop.append(launcher.run(box.argv, env))
        t = box.estate.tenancy
        extra = (
            f"counted ticks: leases spent {len(t.leases) - leases}, reports {len(t.reports)}, "
            f"check-ins {len(t.checkins) - 1} (all 304: "
            f"{all(v is not None for v in t.checkin_if_none_match[1:])}), "
            f"engine calls {len(box.engine_calls) - 1}"
        )
        split = phases(box.argv, env, args.runs)  # after the counts: not among the counted
    if args.save_walls:
        args.save_walls.write_text(json.dumps([round(r.wall_ms, 1) for r in noop]) + "\n")
    b, f, n = stats(base), stats(floor), stats(noop)
    print(
        f"runs={args.runs}  src={args.src or 'this checkout'}  load average before/after: "
        f"{load_before[0]:.2f} / {os.getloadavg()[0]:.2f}  ({os.cpu_count()} CPUs)"
    )
    print(
        f"{'':30} {'wall med ms':>11} {'wall p90 ms':>11} {'cpu med ms':>10} {'peak RSS MiB':>12}"
    )
    rows = (
        ("import baseline", b),
        ("floor (libs + 1 model)", f),
        ("no-op tick (whole process)", n),
    )
    for name, s in rows:
        print(f"{name:30} {s[0]:11.1f} {s[1]:11.1f} {s[2]:10.1f} {s[3]:12.1f}")
    print(
        f"{'ratio floor / baseline':30} {f[0] / b[0]:11.2f} {f[1] / b[1]:11.2f} "
        f"{f[2] / b[2]:10.2f} {f[3] / b[3]:12.2f}"
    )
    print(
        f"{'ratio tick / baseline':30} {n[0] / b[0]:11.2f} {n[1] / b[1]:11.2f} "
        f"{n[2] / b[2]:10.2f} {n[3] / b[3]:12.2f}   (goal: <= 0.80, <= 0.80, <= 0.80, <= 1.00)"
    )
    print(
        f"exit codes: baseline {sorted({r[3] for r in base})}, floor "
        f"{sorted({r[3] for r in floor})}, tick {sorted({r[3] for r in noop})}"
    )
    print(extra)
    med = [statistics.median(r[i] for r in split) for i in range(6)]
    print(
        f"where the tick's CPU goes (in one process, median of {args.runs}):\n"
        f"  {'the floor: the libraries as the floor uses them':58} {med[0]:6.1f} ms\n"
        f"  {'the agent: its modules and what they import beyond it':58} {med[1]:6.1f} ms "
        f"({med[3]:.0f} modules, {med[4]:.0f} dataclasses, {med[5]:.0f} pydantic models)\n"
        f"  {'the tick: config, state, check-in, engine, ledger, log':58} {med[2]:6.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
