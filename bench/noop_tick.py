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
ticks made.
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
