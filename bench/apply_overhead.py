"""What a full apply tick costs beyond docker compose itself (issue 15's goal: at most 1.15x of
raw ``docker compose pull && docker compose up -d`` of the same files, verify excluded).

    .venv/bin/python bench/apply_overhead.py [--runs N]

Needs the Docker engine (scripts/docker-up.sh). One estate (loopback tenancy and OpenBao, a real
registry with authentication) and a two-service bundle. Each run, interleaved:
- agent: tenancy publishes a new revision (one .env value changed, so compose recreates both
  containers) and the real CLI runs one tick as a process (``apply --once``): check-in, secrets,
  render, credential, pre-flight, stage, pull, up, verify, commit, report. Its wall time minus
  its verify phase (which waits ``verify.stable_s`` by design) is compared.
- raw: the same compose file and rendered .env, with the same value changed, in a directory of
  its own (another project name), with the agent's registry credential
  (``DOCKER_CONFIG=<state>/docker``): ``docker compose pull`` then ``docker compose up -d``.
Prints median and p90 of each, the ratio of medians, the agent's own time (its wall time outside
the verify, pull and up phases: less noisy than the ratio, which compose's ``up`` dominates), and
the agent's median per phase.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

from monky_deployd_testkit import dockerlab
from monky_deployd_testkit.lab import Lab


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    image = dockerlab.ensure_busybox_image()
    raw_project = "raw" + uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="monky-apply-") as tmp, dockerlab.Registry() as reg:
        lab = Lab(Path(tmp), reg, reg.push(image, "env-e2e-01/web", "bench"))
        raw_dir = Path(tmp) / "raw"
        raw_dir.mkdir()
        docker_env = {
            "PATH": os.environ["PATH"],
            "HOME": str(Path(tmp) / "home"),
            "DOCKER_CONFIG": str(lab.state_dir / "docker"),
        }
        agent_ms: list[float] = []
        verify_ms: list[float] = []
        own_ms: list[float] = []  # the agent's time outside its verify, pull and up phases
        raw_ms: list[float] = []
        phases: defaultdict[str, list[float]] = defaultdict(list)
        try:
            lab.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": "x"})
            for i in range(args.runs + 1):  # run 0 warms both (first pull, first up)
                template = f"DB_PASSWORD=${{DB_PASSWORD}}\nLOG_LEVEL=run{i}\n"
                bundle = lab.bundle(env_template=template, services=("web", "worker"))
                lab.estate.tenancy.set_desired(f"r{i}", bundle)
                started = time.perf_counter()
                run = lab.tick()
                wall = (time.perf_counter() - started) * 1000
                if run.rc != 0:
                    print(run.stdout[-3000:], run.stderr[-2000:], file=sys.stderr)
                    return 1
                ends = {ln["phase"]: float(ln["ms"]) for ln in run.events("phase.end")}
                # the raw side: the same files, the same change
                rev = lab.state_dir / "revisions" / f"r{i}"
                shutil.copy(rev / "compose.yaml", raw_dir / "compose.yaml")
                shutil.copy(rev / ".env", raw_dir / ".env")
                started = time.perf_counter()
                for verb in (("pull",), ("up", "-d")):
                    subprocess.run(
                        ("docker", "compose", "-p", raw_project, *verb),
                        cwd=raw_dir,
                        env=docker_env,
                        check=True,
                        capture_output=True,
                    )
                raw = (time.perf_counter() - started) * 1000
                if i == 0:
                    continue
                agent_ms.append(wall - ends.get("verify", 0.0))
                verify_ms.append(ends.get("verify", 0.0))
                own_ms.append(wall - sum(ends.get(p, 0.0) for p in ("verify", "pull", "up")))
                raw_ms.append(raw)
                for name, ms in ends.items():
                    phases[name].append(ms)
        finally:
            subprocess.run(
                ("docker", "compose", "-p", raw_project, "down", "-t", "1"),
                cwd=raw_dir,
                env=docker_env,
                capture_output=True,
                check=False,
            )
            lab.cleanup()
    a, r = statistics.median(agent_ms), statistics.median(raw_ms)
    print(f"runs={args.runs} (after one warm-up each)  load average {load:.2f} -> "
          f"{os.getloadavg()[0]:.2f}  ({os.cpu_count()} CPUs)")  # fmt: skip
    print(f"{'':44} {'median ms':>10} {'p90 ms':>8}")
    print(f"{'raw docker compose pull && up -d':44} {r:10.0f} {p90(raw_ms):8.0f}")
    print(f"{'agent apply tick (process), verify excluded':44} {a:10.0f} {p90(agent_ms):8.0f}")
    print(f"{'  its verify phase (apart)':44} {statistics.median(verify_ms):10.0f}")
    print(f"{'  its own: outside verify, pull and up':44} {statistics.median(own_ms):10.0f} "
          f"{p90(own_ms):8.0f}")  # fmt: skip
    print(f"ratio agent / raw (medians): {a / r:.2f}   (goal <= 1.15)")
    print("agent phases, median ms: " + ", ".join(
        f"{k} {statistics.median(v):.0f}" for k, v in phases.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
