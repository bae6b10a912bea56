"""Peak RSS of a tick process that takes the largest bundle the limits allow (issue 15).

    .venv/bin/python bench/memory.py [--runs N]

No Docker needed (``monky_deployd_testkit.steady``: loopback tenancy and OpenBao, a loopback
Engine API). Tenancy publishes a new revision close to ``max_bundle_bytes`` (4 MiB, the cap on a
check-in answer) in one of these shapes, and the CLI runs one tick as a process: check-in (the
whole answer read and parsed), bundle validation (the compose YAML parsed under its 20,000-node
budget), secrets, the .env render. The loopback engine answers no ``docker info``, so the tick
then stops at the pre-flight (DOCKER_UNAVAILABLE, exit 1) before staging: what is measured is
everything that holds the bundle in memory.

- ``noop``: the steady tick, for reference.
- ``template``: an ``env_template`` of ``K=v ${A} w`` lines (every line substitutes), as many
  as fit: about 190,000.
- ``compose``: a compose file of one service with environment entries of about 200 bytes, as
  many as fit under both caps (19,000 at most: the node budget).
- ``both``: half of each.

Prints the median peak RSS per shape and the bound stated in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _spawn import Launcher

from monky_deployd_testkit.steady import PROJECT, SteadyBox

BOUND_MIB = 160  # bench/README.md states it
LIMIT = 4 * 1024 * 1024
SLACK = 64 * 1024  # JSON framing, the manifest, the other keys


def template(size: int) -> str:
    line = "K{:07d}=v ${{A}} w\n"
    return "".join(line.format(i) for i in range(size // len(line.format(0))))


def compose(size: int) -> str:
    entry = "      - VAR{:05d}=" + "x" * 180 + "\n"
    count = min(19_000, size // len(entry.format(0)))
    head = "services:\n  web:\n    image: registry.invalid/steady/web:2\n    environment:\n"
    return head + "".join(entry.format(i) for i in range(count))


def bundle(tpl: str, comp: str) -> dict[str, Any]:
    return {
        "project": PROJECT,
        "compose": comp,
        "env_template": tpl,
        "manifest": [{"name": "A", "path": "envs/env-steady-01/app", "key": "a"}],
    }


def fitted(tpl_share: float, comp_share: float) -> dict[str, Any]:
    """The largest bundle of this shape whose JSON (what tenancy sends) fits the limit."""
    scale = 1.0
    while True:
        budget = (LIMIT - SLACK) * scale
        b = bundle(template(int(budget * tpl_share)), compose(int(budget * comp_share)))
        size = len(json.dumps(b))
        if size <= LIMIT - SLACK // 2:
            return b
        scale *= (LIMIT - SLACK) / size


SHAPES = {
    "template": lambda: fitted(1.0, 0.0),
    "compose": lambda: fitted(0.0, 1.0),
    "both": lambda: fitted(0.5, 0.5),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rows: dict[str, list[float]] = {"noop": [], **{k: [] for k in SHAPES}}
    sizes: dict[str, int] = {}
    outcomes: dict[str, set[int]] = {k: set() for k in rows}
    with (
        Launcher() as launcher,
        tempfile.TemporaryDirectory(prefix="monky-mem-") as tmp,
        SteadyBox(Path(tmp)) as box,
    ):
        box.estate.bao.set_secret("envs/env-steady-01/app", {"a": "v"})
        env = box.env()
        launcher.run(box.argv, env)  # the lease
        for n in range(args.runs):
            row = launcher.run(box.argv, env)
            rows["noop"].append(row.rss_mib)
            outcomes["noop"].add(row.rc)
            for name, make in SHAPES.items():
                b = make()
                sizes[name] = len(json.dumps(b))
                box.estate.tenancy.set_desired(f"{name}{n}", b)
                row = launcher.run(box.argv, env)
                rows[name].append(row.rss_mib)
                outcomes[name].add(row.rc)
                box.estate.tenancy.set_desired("r1", bundle("", compose(0)))
    print(f"runs={args.runs}  load average {os.getloadavg()[0]:.2f}  ({os.cpu_count()} CPUs)")
    print(f"{'shape':10} {'bundle bytes':>12} {'peak RSS MiB':>12}  exit codes")
    for name, values in rows.items():
        print(
            f"{name:10} {sizes.get(name, 0):12d} {statistics.median(values):12.1f}  "
            f"{sorted(outcomes[name])}"
        )
    worst = max(statistics.median(v) for v in rows.values())
    print(
        f"bound: {BOUND_MIB} MiB peak RSS per tick process -> "
        + ("OK" if worst <= BOUND_MIB else "OVER")
    )
    return 0 if worst <= BOUND_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
