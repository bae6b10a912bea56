"""Run a fake estate (FakeBao + FakeTenancy) until SIGTERM/SIGINT, for the README demo.

    python -m monky_deployd_testkit.fakes.serve --env env-demo-01 \
        --state-file /tmp/demo/fakes.json \
        [--desired desired.json] [--secrets secrets.json] [--tenancy-port N] [--openbao-port N]

The state file (mode 0600) holds {"tenancy_port", "openbao_port", "grant"}; `grant` is the JWT
a kit would install as grant.jwt. `--desired` is {"revision", "bundle"}; `--secrets` is
{"<kv path>": {"<key>": <value>}} (paths relative to the `kv` mount, e.g. envs/<env>/app).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from monky_deployd_testkit.fakes.clock import Clock
from monky_deployd_testkit.fakes.estate import Estate, write_private


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m monky_deployd_testkit.fakes.serve", description=__doc__
    )
    ap.add_argument("--env", required=True)
    ap.add_argument("--state-file", required=True, type=Path)
    ap.add_argument("--desired", type=Path, help='JSON {"revision": ..., "bundle": {...}}')
    ap.add_argument("--secrets", type=Path, help='JSON {"envs/<env>/app": {"key": "value"}}')
    ap.add_argument("--tenancy-port", type=int, default=0)
    ap.add_argument("--openbao-port", type=int, default=0)
    args = ap.parse_args(argv)

    estate = Estate(
        args.env,
        clock=Clock(ticking=True),  # a demo runs in real time: tokens age, the budget rolls
        bao_port=args.openbao_port,
        tenancy_port=args.tenancy_port,
    )
    if args.desired:
        desired = json.loads(args.desired.read_text(encoding="utf-8"))
        estate.tenancy.set_desired(str(desired["revision"]), desired["bundle"])
    if args.secrets:
        for path, data in json.loads(args.secrets.read_text(encoding="utf-8")).items():
            estate.bao.set_secret(path, data)

    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    with estate:
        state = {
            "tenancy_port": estate.tenancy.port,
            "openbao_port": estate.bao.port,
            "grant": estate.grant,
        }
        write_private(args.state_file, json.dumps(state).encode())
        print(
            f"fake estate for {args.env}: tenancy {estate.tenancy.url}, "
            f"openbao {estate.bao.url}; state in {args.state_file}",
            file=sys.stderr,
            flush=True,
        )
        while not done.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
