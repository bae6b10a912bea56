"""Measure a steady-state (no-op) tick as a whole process, against the baseline of importing the
agent's libraries. Prints median wall time, CPU time (user+sys) and peak RSS over N runs.

    .venv/bin/python bench/noop_tick.py [N]

Needs the Docker engine (scripts/docker-up.sh): it applies one revision to a real container first.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from monky_deployd_testkit import dockerlab
from monky_deployd_testkit.lab import CLI, Lab

ROOT = Path(__file__).resolve().parents[1]

BASELINE = (sys.executable, "-c", "import httpx, pydantic, hvac, yaml, pythonjsonlogger")


def measure(argv: tuple[str, ...], env: dict[str, str]) -> tuple[float, float, int, int]:
    """(wall ms, cpu ms, peak RSS KiB, exit code) of one child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - started) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = (usage.ru_utime + usage.ru_stime) * 1000
    return wall, cpu, usage.ru_maxrss, proc.returncode


def report(name: str, rows: list[tuple[float, float, int, int]]) -> None:
    wall = statistics.median(r[0] for r in rows)
    cpu = statistics.median(r[1] for r in rows)
    rss = statistics.median(r[2] for r in rows)
    codes = sorted({r[3] for r in rows})
    print(
        f"{name:<34} runs={len(rows):<3} wall_ms={wall:7.1f} cpu_ms={cpu:7.1f} "
        f"peak_rss_mib={rss / 1024:6.1f} exit={codes}"
    )


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    image = dockerlab.ensure_busybox_image()
    with tempfile.TemporaryDirectory(prefix="monky-bench-") as tmp, dockerlab.Registry() as reg:
        lab = Lab(Path(tmp), reg, reg.push(image, "env-e2e-01/web", "bench"))
        try:
            lab.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": "x"})
            lab.estate.tenancy.set_desired("r1", lab.bundle())
            first = lab.tick()
            if first.rc != 0:
                print(first.stdout, file=sys.stderr)
                return 1
            env = {"PATH": os.environ["PATH"], "HOME": str(Path(tmp) / "home")}
            tick = (*CLI, "apply", "--once", "--config", str(lab.config_path))
            base, noop = [], []
            for _ in range(n):  # interleave so both see the same machine conditions
                base.append(measure(BASELINE, env))
                noop.append(measure(tick, env))
            report("import baseline", base)
            report("no-op tick (whole process)", noop)
            t = lab.estate.tenancy
            print(
                f"leases={len(t.leases)} reports={len(t.reports)} "
                f"checkins={len(t.checkins)} "
                f"registry_manifest_requests={lab.pulls()}"
            )
        finally:
            lab.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
