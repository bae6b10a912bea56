"""A box in the steady state, without Docker: for the no-op tick's benchmark and import test.

The loopback fakes (tenancy answers 304 to the applied revision), a loopback Docker Engine API
that lists the applied project's one container as running, with its one bind (``GET
/containers/json``; ``GET /volumes``: none), and a state dir holding what an earlier apply
left: the revision's directory with its held host path (``paths.held.json``: the steady tick
follows it again and asks the engine's mounts, issue 45), ``applied.json`` and ``host.json``.
The first tick spends the lease; every tick after it is the no-op a box runs every minute:
``argv`` runs it as the timer does (a new process).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import yaml

import monky_deployd
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.core.records.applied import Applied
from monky_deployd.core.wire.checkin import HostFacts
from monky_deployd_testkit.fakes.estate import Estate

ENV = "env-steady-01"
PROJECT = "steady"
REVISION = "r1"

# What a tick's process runs, and the same process that writes its module names to MODULES_OUT
# at exit (the import test's view of what a tick loaded).
_COMPOSE = "services:\n  web:\n    image: registry.invalid/steady/web:1\n"

CLI = (sys.executable, "-m", "monky_deployd.cli")
_DUMP = (
    "import atexit, os, runpy, sys\n"
    "atexit.register(lambda: open(os.environ['MONKY_MODULES_OUT'], 'w')"
    ".write('\\n'.join(sorted(sys.modules))))\n"
    "sys.argv = ['monky-deployd', *sys.argv[1:]]\n"
    "runpy.run_module('monky_deployd.cli', run_name='__main__')\n"
)
CLI_DUMPING_MODULES = (sys.executable, "-c", _DUMP)


class _Engine(BaseHTTPRequestHandler):
    rows: ClassVar[list[dict[str, Any]]] = []
    calls: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.calls.append(self.path)
        if self.path.startswith("/volumes"):
            body = json.dumps({"Volumes": [], "Warnings": []}).encode()
        elif not self.path.startswith("/containers/json"):
            self.send_response(404)
            self.end_headers()
            return
        else:
            body = json.dumps(self.rows).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class SteadyBox:
    """``with SteadyBox(tmp) as box:`` then ``box.argv`` is one steady tick's command line."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.estate: Estate[Any] = Estate(env=ENV)
        engine: type[_Engine] = type("Engine", (_Engine,), {"rows": [], "calls": []})
        self.data = tmp / "srv" / "data"  # the revision's one bind (writable)
        engine.rows = [
            {
                "Id": "0" * 64,
                "Names": [f"/{PROJECT}-web-1"],
                "Image": "registry.invalid/steady/web:1",
                "State": "running",
                "Status": "Up 5 minutes",
                "Labels": {
                    "com.docker.compose.project": PROJECT,
                    "com.docker.compose.service": "web",
                },
                "Mounts": [{"Type": "bind", "Source": str(self.data), "RW": True}],
            }
        ]
        self.engine_calls: list[str] = engine.calls
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), engine)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.state_dir = tmp / "state"
        self.config_path = tmp / "config.yaml"
        self.textfile_dir = tmp / "textfile"

    def __enter__(self) -> SteadyBox:
        self.estate.start()
        self._thread.start()
        grant = self.estate.write_grant(self.tmp / "grant.jwt")
        cfg = self.estate.config(state_dir=self.state_dir, grant_file=grant)
        cfg["docker"] = {"host": f"tcp://127.0.0.1:{self._server.server_address[1]}"}
        # metrics on, as on a box with node-exporter: a quiet tick only touches the textfile
        self.textfile_dir.mkdir(exist_ok=True)
        cfg["metrics"] = {"textfile_dir": str(self.textfile_dir)}
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.estate.tenancy.set_desired(
            REVISION,
            {
                "project": PROJECT,
                "compose": _COMPOSE,
                "env_template": "",
                "manifest": [],
            },
        )
        state = StateDir(self.state_dir).ensure()
        state.write_revision(REVISION, _COMPOSE, "")
        self.data.mkdir(parents=True, exist_ok=True)
        from monky_deployd.adapters.box.docker.hostpath import follow, write_held
        from monky_deployd.core.admission.artifact import Bind
        from monky_deployd.core.admission.paths import hold

        bind = Bind("web", "volumes", str(self.data), "service web of this release")
        held = hold([bind], {bind.path: follow(bind.path)})
        write_held(state.revision_dir(REVISION), held)
        state.write_applied(Applied(REVISION, PROJECT, ["web"], "2026-12-03T00:00:00Z"))
        state.write_host_facts(
            HostFacts(hostname=socket.gethostname(), docker="29.0.1", compose="2.40.0")
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.estate.stop()

    @property
    def argv(self) -> tuple[str, ...]:
        return (*CLI, "apply", "--once", "--config", str(self.config_path))

    def env(self, **extra: str) -> dict[str, str]:
        """The tick's environment: it runs the ``monky_deployd`` this process imported (a
        worktree's sources, not only the installed one's)."""
        src = str(Path(monky_deployd.__file__).resolve().parents[1])
        return {
            "PATH": os.environ["PATH"],
            "HOME": str(self.tmp / "home"),
            "PYTHONPATH": src,
            **extra,
        }
