"""A real one-box OpenZiti network on 127.0.0.1: the ``ziti`` program (built once per machine by
``scripts/ziti-up.sh``) as controller and tunneler-enabled edge router, with the estate's two
services, their policies and an identity enrolled as an operator does it.

Start one (tests: the session fixture ``ziti_net`` in tests/conftest.py)::

    with ZitiNet(upstreams={"tenancy": 40123, "openbao": bao.port}) as net:
        identity = net.enroll("box-1")            # Path of the identity JSON (both attributes)
        cfg = agent_config(cfg, identity)         # ziticonf: transport ziti, the intercepts
        net.mgmt("GET", "identities")             # the management API, as the admin

By hand: ``scripts/ziti-up.sh start DIR [TENANCY_PORT OPENBAO_PORT]`` (the binary, then
``python -m monky_deployd_testkit.zitiup``: upstreams 127.0.0.1:18080 and :8200 unless given).

What it builds, all on 127.0.0.1 (never 0.0.0.0) on free ports, in a directory of its own:

- PKI (``ziti pki``): a root CA, an intermediate that signs the controller's certificates and
  is the enrolment signer; names ``localhost`` and 127.0.0.1 (libziti 0.29's mbed TLS checks the
  DNS name: the advertised addresses are ``localhost:<port>``);
- the controller (``ziti controller edge init`` + ``run``, a config written here);
- one edge router, tunneler enabled in ``host`` mode (it hosts the services itself: no separate
  tunneler), enrolled with its JWT, edge listener on 127.0.0.1;
- services ``monky.tenancy.deploy`` (intercept.v1 ``tenancy.monky.ziti:443``) and
  ``openbao`` (``openbao.monky.ziti:8200``), each with a host.v1 config forwarding to its
  upstream on 127.0.0.1; dial policies on ``#monky-deploy-agent`` / ``#openbao-client``, a bind
  policy for the router's identity, edge-router and service-edge-router policies on ``#all``;
- ``enroll(name, roles)``: ``ziti edge create identity NAME -a ROLES -o NAME.jwt`` and
  ``ziti edge enroll NAME.jwt -o NAME.json`` (the CLI, logged in as the admin).

``start()`` returns once the router is online and both services have a terminator. A
controller or router that does not come up fails loudly with the end of its log.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import httpx
import yaml

from monky_deployd_testkit import ziticonf
from monky_deployd_testkit.dockerlab import free_port, terminate
from monky_deployd_testkit.realbao import _die_with_parent
from monky_deployd_testkit.ziticonf import HOST, ROLES, SERVICES, Service

# what a test needs beside ZitiNet, importable from here too
from monky_deployd_testkit.ziticonf import OPENBAO as OPENBAO
from monky_deployd_testkit.ziticonf import TENANCY as TENANCY
from monky_deployd_testkit.ziticonf import agent_config as agent_config

VERSION = os.environ.get("MONKY_ZITI_VERSION", "v1.6.0")
ROOT = Path(os.environ.get("MONKY_ZITI_ROOT", "/opt/monky-ziti"))
UP_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ziti-up.sh"
START_TIMEOUT_S = 90.0


class ZitiNetError(RuntimeError):
    """The network could not be built or started (never skipped: the test fails)."""


def ziti_binary() -> Path:
    """MONKY_ZITI_BIN, else the cached build; builds it (scripts/ziti-up.sh, which waits on a
    build already running) when missing."""
    given = os.environ.get("MONKY_ZITI_BIN")
    if given:
        return Path(given)
    cached = ROOT / VERSION / "ziti"
    if not cached.exists():
        proc = subprocess.run(("bash", str(UP_SCRIPT)), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ZitiNetError(f"scripts/ziti-up.sh failed:\n{proc.stderr[-3000:]}")
    return cached


class ZitiNet:
    """One controller and one edge router; a context manager. ``upstreams``: where each
    service's host.v1 config forwards (``tenancy``, ``openbao``: ports on 127.0.0.1)."""

    def __init__(
        self,
        upstreams: Mapping[str, int],
        *,
        root: Path | None = None,
        binary: Path | None = None,
    ) -> None:
        self.upstreams = dict(upstreams)
        self.binary = binary
        self.dir = root
        self._own_dir = root is None
        self.password = secrets.token_hex(12)
        self.api_port = self.ctrl_port = self.edge_port = 0
        self.router_id = ""
        self.ids: dict[str, str] = {}  # name -> id of what start() created
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._session = ""

    # -- paths and addresses ---------------------------------------------------------------
    @property
    def api(self) -> str:
        return f"https://{HOST}:{self.api_port}"

    @property
    def ca_bundle(self) -> Path:
        assert self.dir is not None
        return self.dir / "pki" / "ca-bundle.pem"

    def log(self, what: str) -> Path:
        assert self.dir is not None
        return self.dir / f"{what}.log"

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        self.binary = self.binary or ziti_binary()
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="zitinet-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.api_port, self.ctrl_port, self.edge_port = free_port(), free_port(), free_port()
        try:
            self._pki()
            self._controller()
            self._router()
            self._services()
            self._wait_terminators()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in ("router", "controller"):
            terminate(self._procs.pop(name, None))
        if self._own_dir and self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def stop_process(self, name: str) -> None:
        """Stop ``router`` or ``controller`` (a fault); ``start_process`` brings it back."""
        terminate(self._procs.pop(name, None))

    def start_process(self, name: str) -> None:
        assert self.dir is not None
        config = self.dir / ("ctrl.yaml" if name == "controller" else "router.yaml")
        self._spawn(name, (name, "run", str(config)))
        if name == "controller":
            self._wait_api()
        else:
            self._wait_router_online()

    # -- the ziti program ------------------------------------------------------------------
    def ziti(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``ziti ARGS`` with this network's own HOME (the CLI's login lives there)."""
        assert self.binary is not None and self.dir is not None
        proc = subprocess.run(
            (str(self.binary), *args),
            capture_output=True,
            text=True,
            env=self._env(),
            timeout=120,
            check=False,
        )
        if check and proc.returncode != 0:
            raise ZitiNetError(f"ziti {' '.join(args[:3])} failed:\n{proc.stdout}{proc.stderr}")
        return proc

    def _env(self) -> dict[str, str]:
        assert self.dir is not None
        home = self.dir / "home"
        home.mkdir(exist_ok=True)
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
        }

    def _spawn(self, name: str, args: Sequence[str]) -> None:
        assert self.binary is not None
        with self.log(name).open("ab") as sink:
            self._procs[name] = subprocess.Popen(
                (str(self.binary), *args),
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
                env=self._env(),
            )

    def _fail(self, what: str, name: str) -> ZitiNetError:
        text = self.log(name).read_text(errors="replace")[-3000:] if self.dir else ""
        return ZitiNetError(f"{what}; the end of {name}.log:\n{text}")

    # -- PKI -------------------------------------------------------------------------------
    def _pki(self) -> None:
        assert self.dir is not None
        for argv in ziticonf.pki_commands(self.dir / "pki"):
            self.ziti(*argv)
        root = (self.dir / "pki" / "root" / "certs" / "root.cert").read_text()
        inter = (self.dir / "pki" / "int" / "certs" / "int.cert").read_text()
        self.ca_bundle.write_text(inter + root)

    # -- controller ------------------------------------------------------------------------
    def _controller(self) -> None:
        assert self.dir is not None
        config = ziticonf.controller(self.dir, self.api_port, self.ctrl_port)
        path = self.dir / "ctrl.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.ziti("controller", "edge", "init", str(path), "-u", "admin", "-p", self.password)
        self._spawn("controller", ("controller", "run", str(path)))
        self._wait_api()
        self._login()

    def _wait_api(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            proc = self._procs.get("controller")
            if proc is None or proc.poll() is not None:
                raise self._fail("the controller exited", "controller")
            with contextlib.suppress(httpx.HTTPError), self._client() as client:
                if client.get("/edge/client/v1/version").status_code == 200:
                    return
            time.sleep(0.2)
        raise self._fail("the controller's API did not answer", "controller")

    def _client(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"https://127.0.0.1:{self.api_port}",
            verify=ssl.create_default_context(cafile=self.ca_bundle),  # it names 127.0.0.1 too
            timeout=15,
            trust_env=False,
        )

    def _login(self) -> None:
        with self._client() as client:
            resp = client.post(
                "/edge/management/v1/authenticate",
                params={"method": "password"},
                json={"username": "admin", "password": self.password},
            )
        if resp.status_code != 200:
            raise ZitiNetError(f"admin login answered {resp.status_code}: {resp.text[:300]}")
        self._session = resp.json()["data"]["token"]
        self.ziti(
            "edge", "login", f"{HOST}:{self.api_port}", "-u", "admin", "-p", self.password,
            "--ca", str(self.ca_bundle), "-y",
        )  # fmt: skip

    def mgmt(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = ()) -> Any:
        """A call of the edge management API as the admin; the JSON answer's ``data``."""
        with self._client() as client:
            resp = client.request(
                method,
                f"/edge/management/v1/{path}",
                json=body,
                headers={"zt-session": self._session},
            )
        if resp.status_code not in (200, 201, 204, *ok):
            raise ZitiNetError(f"{method} {path} answered {resp.status_code}: {resp.text[:500]}")
        return resp.json().get("data") if resp.content else None

    # -- edge router -----------------------------------------------------------------------
    def _router(self) -> None:
        assert self.dir is not None
        created = self.mgmt(
            "POST",
            "edge-routers",
            {"name": "monky-router", "isTunnelerEnabled": True, "roleAttributes": ["monky"]},
        )
        self.router_id = created["id"]
        jwt = self.mgmt("GET", f"edge-routers/{self.router_id}")["enrollmentJwt"]
        (self.dir / "router.jwt").write_text(jwt)
        rdir = self.dir / "router"
        rdir.mkdir(exist_ok=True)
        config = ziticonf.router(rdir, self.ctrl_port, self.edge_port)
        path = self.dir / "router.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.ziti("router", "enroll", str(path), "--jwt", str(self.dir / "router.jwt"))
        self._spawn("router", ("router", "run", str(path)))
        self._wait_router_online()

    def _wait_router_online(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            proc = self._procs.get("router")
            if proc is None or proc.poll() is not None:
                raise self._fail("the edge router exited", "router")
            if self.mgmt("GET", f"edge-routers/{self.router_id}").get("isOnline"):
                return
            time.sleep(0.2)
        raise self._fail("the edge router did not come online", "router")

    # -- services and policies -------------------------------------------------------------
    def _config_type(self, name: str) -> str:
        found = self.mgmt("GET", f'config-types?filter=name="{name}"')
        return str(found[0]["id"])

    def _services(self) -> None:
        # the router policies first: a bind the router asks for before them is refused
        # ("invalid edge router for session") and not retried for a minute
        for kind, roles in (
            ("edge-router-policies", {"identityRoles": ["#all"]}),
            ("service-edge-router-policies", {"serviceRoles": ["#all"]}),
        ):
            self.ids[kind] = self.mgmt(
                "POST",
                kind,
                {"name": f"all-{kind}", "semantic": "AnyOf", "edgeRouterRoles": ["#all"], **roles},
            )["id"]
        intercept, host = self._config_type("intercept.v1"), self._config_type("host.v1")
        for svc in SERVICES:
            ic = self.mgmt(
                "POST",
                "configs",
                {
                    "name": f"{svc.name}.intercept",
                    "configTypeId": intercept,
                    "data": ziticonf.intercept(svc),
                },
            )["id"]
            hc = self.mgmt(
                "POST",
                "configs",
                {
                    "name": f"{svc.name}.host",
                    "configTypeId": host,
                    "data": ziticonf.host(self.upstreams[svc.upstream]),
                },
            )["id"]
            sid = self.mgmt(
                "POST",
                "services",
                {"name": svc.name, "configs": [ic, hc], "encryptionRequired": True},
            )["id"]
            self.ids[svc.name] = sid
            self.ids[f"{svc.name}.intercept"], self.ids[f"{svc.name}.host"] = ic, hc
            self._policy(f"dial-{svc.name}", "Dial", [f"#{svc.role}"], [f"@{sid}"])
        self._policy(
            "bind-router",
            "Bind",
            [f"@{self.router_id}"],
            [f"@{self.ids[s.name]}" for s in SERVICES],
        )

    def _policy(self, name: str, kind: str, identities: list[str], services: list[str]) -> None:
        self.ids[name] = self.mgmt(
            "POST",
            "service-policies",
            {
                "name": name,
                "type": kind,
                "semantic": "AnyOf",
                "identityRoles": identities,
                "serviceRoles": services,
            },
        )["id"]

    def terminators(self, service: Service) -> int:
        found = self.mgmt("GET", f'terminators?filter=service="{self.ids[service.name]}"')
        return len(found)

    def _wait_terminators(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if all(self.terminators(s) for s in SERVICES):
                return
            time.sleep(0.2)
        raise self._fail("the router did not host both services (no terminator)", "router")

    # -- identities ------------------------------------------------------------------------
    def enroll(self, name: str, roles: Sequence[str] = ROLES) -> Path:
        """An identity as an operator makes one: created with ``roles`` (an empty sequence: none),
        its one-time token enrolled; the identity JSON's path (mode 0600)."""
        assert self.dir is not None
        ids = self.dir / "identities"
        ids.mkdir(exist_ok=True)
        jwt, out = ids / f"{name}.jwt", ids / f"{name}.json"
        attrs = ("-a", ",".join(roles)) if roles else ()
        self.ziti("edge", "create", "identity", name, *attrs, "-o", str(jwt))
        self.ziti("edge", "enroll", str(jwt), "-o", str(out))
        out.chmod(0o600)
        return out

    def dialled(self, name: str) -> set[str]:
        """The services the controller issued the identity ``name`` a Dial session for (its
        SDK asked to dial them through this network)."""
        ident = self.identity_id(name)
        found = self.mgmt("GET", 'sessions?filter=type="Dial"&limit=500')
        names = {v: k for k, v in self.ids.items()}
        return {
            names.get(s["serviceId"], s["serviceId"])
            for s in found
            if ident in (s.get("identityId"), (s.get("apiSession") or {}).get("identityId"))
        }

    def identity_id(self, name: str) -> str:
        return str(self.mgmt("GET", f'identities?filter=name="{name}"')[0]["id"])
