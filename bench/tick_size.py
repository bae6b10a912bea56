"""A whole apply tick's time by the size of the bundle's env_template (issue 22).

    .venv/bin/python bench/tick_size.py [--sizes 0.25,0.5,1,2,4] [--profile DIR]

Needs the Docker engine (scripts/docker-up.sh). One estate (loopback tenancy and OpenBao, a real
registry with authentication, the real engine) and a one-service bundle whose env_template is one
``DB_PASSWORD=${DB_PASSWORD}`` line and ``KNNNNNNN=v`` lines (plain: nothing to substitute), as
many as make the bundle's JSON (what tenancy sends) the size given in MiB; the largest fits
``max_bundle_bytes`` (4 MiB, the cap on a check-in answer) with its framing. For each size
tenancy publishes a new revision and the real CLI runs one tick as a process (``apply --once``):
check-in, secrets, render, credential, pre-flight, stage, pull, up, verify, commit, report.
Prints each tick's wall time, its outcome, the seconds per MiB (a linear tick keeps that flat)
and the phases of 50 ms or more from the report tenancy received. ``verify.stable_s`` is 1 s here
(the verify phase waits that long by design).

``--profile DIR`` runs each tick under cProfile (``DIR/<size>.prof``, and the 12 functions with
the most cumulative time printed): where a tick spends its time.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from monky_deployd_testkit import dockerlab
from monky_deployd_testkit.lab import CLI, Lab, cli_env, parse_lines

LIMIT = 4 * 1024 * 1024
SLACK = 16 * 1024  # the JSON framing, the compose file, the manifest
PASSWORD = "pw-" + "x" * 20
LINE = "K{:07d}=v\n"  # 10 bytes, as in the 190,001-line template


def template(mib: float) -> str:
    """A template whose bundle (as tenancy sends it: JSON, each newline escaped) is about
    ``mib`` MiB, at most ``max_bundle_bytes`` less the framing."""
    budget = min(int(mib * 1024 * 1024), LIMIT - SLACK)
    head = "# rendered by the agent: substitutes every ${VAR}\nDB_PASSWORD=${DB_PASSWORD}\n"
    lines = (budget - len(json.dumps(head))) // len(json.dumps(LINE.format(0))[1:-1])
    return head + "".join(LINE.format(i) for i in range(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0.25,0.5,1,2,4", help="template sizes in MiB")
    ap.add_argument("--profile", type=Path, default=None, help="write cProfile output here")
    ap.add_argument(
        "--shape",
        choices=("env_file", "interpolation"),
        default="env_file",
        help="env_file: the service takes the .env whole (every line a container variable); "
        "interpolation: the .env only feeds ${DB_PASSWORD} of the compose file",
    )
    args = ap.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")]
    image = dockerlab.ensure_busybox_image()
    print(f"load average {os.getloadavg()[0]:.2f}  ({os.cpu_count()} CPUs)")
    print(
        f"{'MiB':>5} {'lines':>8} {'bundle B':>9} {'wall s':>7} {'s/MiB':>6}  outcome  phases (ms)"
    )
    with (
        tempfile.TemporaryDirectory(prefix="monky-size-") as tmp,
        dockerlab.Registry() as reg,
        Lab(
            Path(tmp), reg, reg.push(image, "env-e2e-01/web", "bench"), db_password=PASSWORD
        ) as lab,
    ):
        lab.write_config(verify={"stable_s": 1, "deadline_s": 60, "poll_s": 0.25})
        lab.estate.tenancy.set_desired("warm", lab.bundle())
        assert lab.tick().rc == 0, "the warm-up tick failed"
        for n, mib in enumerate(sizes):
            tpl = template(mib)
            bundle = lab.bundle(env_template=tpl)
            if args.shape == "interpolation":
                doc = yaml.safe_load(bundle["compose"])
                del doc["services"]["web"]["env_file"]
                bundle["compose"] = yaml.safe_dump(doc)
            lab.estate.tenancy.set_desired(f"s{n}", bundle)
            argv: tuple[str, ...] = (*CLI, "apply", "--once", "--config", str(lab.config_path))
            if args.profile is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
                prof = args.profile / f"{mib}.prof"
                argv = (CLI[0], "-m", "cProfile", "-o", str(prof), *argv[1:])
            env = cli_env(Path(tmp) / "home")
            t0 = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            wall = time.perf_counter() - t0
            lines = parse_lines(proc.stdout)
            summary = lines[-1] if lines else {}
            reports = lab.estate.tenancy.reports
            last = reports[-1] if reports and reports[-1].get("revision") == f"s{n}" else {}
            phases = " ".join(
                f"{p['name']}={p['ms']}" for p in last.get("phases", []) if p["ms"] >= 50
            )
            print(
                f"{mib:5.2f} {tpl.count(chr(10)):8d} {len(json.dumps(bundle)):9d} "
                f"{wall:7.2f} {wall / mib:6.2f}  {summary.get('outcome', proc.returncode)}  "
                f"{phases}",
                flush=True,
            )
            if args.profile is not None:
                pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
