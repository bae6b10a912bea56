"""A no-op tick's cost in instructions (valgrind's callgrind), against the import baseline: a
figure that does not move with the machine's load, unlike ``noop_tick.py``'s times.

    .venv/bin/python bench/noop_instructions.py [--src DIR ...]

Same box as ``noop_tick.py`` (``monky_deployd_testkit.steady``: loopback tenancy answering 304,
a loopback Engine API, the state an earlier apply left). The first tick spends the lease and is
not counted. Each ``--src DIR`` runs the tick from that checkout's ``src`` (before/after; default:
this checkout). Prints the instructions (Ir) of the baseline (``import httpx, pydantic, hvac,
yaml, pythonjsonlogger``), the floor (the no-op's libraries and one pydantic model) and the tick
per src, and the ratios. Slow: each row is one run under valgrind (about 30-60 s).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from noop_tick import BASELINE, FLOOR

from monky_deployd_testkit.steady import SteadyBox

_TOTAL = re.compile(r"Collected : (\d+)")


def instructions(argv: tuple[str, ...], env: dict[str, str]) -> int:
    """Instructions the process ran (``valgrind --tool=callgrind``'s total Ir)."""
    proc = subprocess.run(
        ("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = _TOTAL.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"{argv[:3]} failed under valgrind: {proc.stderr[-1500:]}")
    return int(found.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, action="append", default=[])
    args = ap.parse_args()
    srcs: list[Path | None] = list(args.src) or [None]
    with tempfile.TemporaryDirectory(prefix="monky-bench-") as tmp, SteadyBox(Path(tmp)) as box:
        env = box.env()
        first = subprocess.run(box.argv, env=env, capture_output=True, text=True, check=False)
        if first.returncode != 0:
            print(first.stdout[-2000:], first.stderr[-2000:], file=sys.stderr)
            return 1
        base = instructions(BASELINE, env)
        floor = instructions(FLOOR, env)
        print(f"{'row':48} {'instructions (M)':>17} {'/ baseline':>11}")
        print(f"{'import baseline':48} {base / 1e6:17.1f} {1:11.2f}")
        print(f"{'floor (libs + 1 model)':48} {floor / 1e6:17.1f} {floor / base:11.2f}")
        for src in srcs:
            run_env = dict(env)
            if src is not None:
                run_env["PYTHONPATH"] = str(src.resolve())
            # once outside valgrind: a checkout's first run also compiles its .pyc files
            subprocess.run(box.argv, env=run_env, capture_output=True, check=False)
            tick = instructions(box.argv, run_env)
            name = f"no-op tick ({src if src is not None else 'this checkout'})"
            print(f"{name[:48]:48} {tick / 1e6:17.1f} {tick / base:11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
