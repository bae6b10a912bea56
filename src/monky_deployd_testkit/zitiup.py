"""A one-box OpenZiti network started by hand (``scripts/ziti-up.sh start DIR``, which runs
``python -m monky_deployd_testkit.zitiup DIR [TENANCY_PORT OPENBAO_PORT]``): zitinet.ZitiNet in
DIR, kept there, with the identity DIR/identities/box.json (both role attributes), the admin's
password in DIR/admin.password and what it listens on in DIR/network.json, in the foreground
until SIGINT or SIGTERM.

Idempotent: while the process DIR/zitinet.pid names runs (written first, removed with
network.json at the end), a second start prints its network.json (or "starting") and leaves it
alone; a DIR a stopped network left behind is started afresh (its files are the network's own:
a DIR with other files in it is refused)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monky_deployd_testkit.ziticonf import HOST, SERVICES
from monky_deployd_testkit.zitinet import ZitiNet

OWN = {"pki", "home", "router", "identities", "zitinet.pid", "network.json", "admin.password"}


def describe(net: ZitiNet, identity: Path) -> dict[str, Any]:
    assert net.dir is not None
    return {
        "controller": net.api,
        "ctrl_port": net.ctrl_port,
        "edge_router": f"{HOST}:{net.edge_port}",
        "services": {s.name: f"{s.host}:{s.port}" for s in SERVICES},
        "upstreams": net.upstreams,
        "identity": str(identity),
        "admin_password_file": str(net.dir / "admin.password"),
        "ca_bundle": str(net.ca_bundle),
        "pid": os.getpid(),
    }


def _running(root: Path) -> bool:
    try:
        pid = int((root / "zitinet.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def _own(name: str) -> bool:
    return name in OWN or name.startswith(("ctrl.", "router.", "controller.", "endpoints."))


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (1, 3):
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0]).resolve()
    if _running(root):
        found = root / "network.json"
        print(found.read_text() if found.exists() else f"{root}: starting\n", end="")
        return 0
    if root.exists():
        strange = sorted(p.name for p in root.iterdir() if not _own(p.name))
        if strange:
            print(
                f"{root} holds files of its own ({', '.join(strange[:5])}): refused",
                file=sys.stderr,
            )
            return 2
        shutil.rmtree(root)
    root.mkdir(parents=True)
    pidfile = root / "zitinet.pid"
    pidfile.write_text(f"{os.getpid()}\n")  # first: a second start meanwhile leaves it alone
    ports = (int(argv[1]), int(argv[2])) if len(argv) == 3 else (18080, 8200)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with ZitiNet({"tenancy": ports[0], "openbao": ports[1]}, root=root) as net:
            identity = net.enroll("box")
            (root / "admin.password").write_text(net.password + "\n")
            (root / "admin.password").chmod(0o600)
            info = json.dumps(describe(net, identity), indent=2) + "\n"
            (root / "network.json").write_text(info)
            print(info, end="", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    finally:
        pidfile.unlink(missing_ok=True)
        (root / "network.json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
