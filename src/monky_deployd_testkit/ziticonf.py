"""The documents of the one-box OpenZiti network (zitinet.py): the estate's two services, the
controller's and the edge router's config files (written here, not by ``ziti edge quickstart``,
which binds the router on 0.0.0.0: everything listens on 127.0.0.1), the services' intercept.v1
and host.v1 configs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "localhost"  # the advertised name (the certificates carry it and 127.0.0.1)


@dataclass(frozen=True)
class Service:
    name: str
    host: str  # the intercept address the agent dials
    port: int
    role: str  # the identity role attribute its dial policy names
    upstream: str  # the key of ZitiNet.upstreams it is hosted to


TENANCY = Service(
    "monky.tenancy.deploy", "tenancy.monky.ziti", 443, "monky-deploy-agent", "tenancy"
)
OPENBAO = Service("openbao", "openbao.monky.ziti", 8200, "openbao-client", "openbao")
SERVICES = (TENANCY, OPENBAO)
ROLES = tuple(s.role for s in SERVICES)


def intercept(svc: Service) -> dict[str, Any]:
    return {
        "protocols": ["tcp"],
        "addresses": [svc.host],
        "portRanges": [{"low": svc.port, "high": svc.port}],
    }


def host(port: int) -> dict[str, Any]:
    """host.v1: the hosting router forwards to 127.0.0.1:``port``."""
    return {"protocol": "tcp", "address": "127.0.0.1", "port": port}


def controller(root: Path, api_port: int, ctrl_port: int) -> dict[str, Any]:
    """ctrl.yaml: the PKI under ``root/pki`` (zitinet's ``_pki``), the database in ``root``."""
    pki = root / "pki"
    ident = {
        "cert": str(pki / "int" / "certs" / "ctrl-client.cert"),
        "server_cert": str(pki / "int" / "certs" / "ctrl-server.chain.pem"),
        "key": str(pki / "int" / "keys" / "ctrl-server.key"),
        "ca": str(pki / "ca-bundle.pem"),
    }
    return {
        "v": 3,
        "db": str(root / "ctrl.db"),
        "identity": ident,
        "ctrl": {
            "options": {"advertiseAddress": f"tls:{HOST}:{ctrl_port}"},
            "listener": f"tls:127.0.0.1:{ctrl_port}",
        },
        "edge": {
            "api": {"sessionTimeout": "30m", "address": f"{HOST}:{api_port}"},
            "enrollment": {
                "signingCert": {
                    "cert": str(pki / "int" / "certs" / "int.cert"),
                    "key": str(pki / "int" / "keys" / "int.key"),
                },
                "edgeIdentity": {"duration": "180m"},
                "edgeRouter": {"duration": "180m"},
            },
        },
        "web": [
            {
                "name": "client-management",
                "bindPoints": [
                    {"interface": f"127.0.0.1:{api_port}", "address": f"{HOST}:{api_port}"}
                ],
                "identity": ident,
                "options": {"minTLSVersion": "TLS1.2", "maxTLSVersion": "TLS1.3"},
                "apis": [
                    {"binding": b, "options": {}}
                    for b in ("health-checks", "edge-management", "edge-client", "fabric")
                ],
            }
        ],
    }


def router(rdir: Path, ctrl_port: int, edge_port: int) -> dict[str, Any]:
    """router.yaml: its enrolment writes the identity files into ``rdir``; the edge listener on
    127.0.0.1, the tunnel binding in ``host`` mode (the router hosts the services itself), no
    link listener (a lone router)."""
    return {
        "v": 3,
        "identity": {
            "cert": str(rdir / "client.cert"),
            "server_cert": str(rdir / "server.cert"),
            "key": str(rdir / "router.key"),
            "ca": str(rdir / "ca.cert"),
        },
        "ctrl": {"endpoint": f"tls:{HOST}:{ctrl_port}"},
        "link": {"dialers": [{"binding": "transport"}]},
        "listeners": [
            {
                "binding": "edge",
                "address": f"tls:127.0.0.1:{edge_port}",
                "options": {"advertise": f"{HOST}:{edge_port}"},
            },
            {"binding": "tunnel", "options": {"mode": "host"}},
        ],
        "edge": {
            "csr": {
                "country": "US",
                "province": "NC",
                "locality": "Charlotte",
                "organization": "monky",
                "organizationalUnit": "tests",
                "sans": {"dns": [HOST], "ip": ["127.0.0.1"]},
            }
        },
    }


def agent_config(cfg: dict[str, Any], identity: Path) -> dict[str, Any]:
    """``cfg`` (an Estate's config mapping) with ``transport: ziti``, ``identity`` and the
    intercept addresses: no loopback port of tenancy or OpenBao is left in it."""
    out = dict(cfg)
    out["transport"] = "ziti"
    out["identity"] = str(identity)
    out["tenancy"] = {**cfg.get("tenancy", {}), "host": TENANCY.host, "port": TENANCY.port}
    out["openbao"] = {**cfg.get("openbao", {}), "host": OPENBAO.host, "port": OPENBAO.port}
    return out


def pki_commands(pki: Path) -> list[tuple[str, ...]]:
    """``ziti pki`` runs for a root CA, the intermediate (the controller's certificates and the
    enrolment signer), the controller's server and client certificates on one key."""
    common = ("pki", "create")
    root = ("--pki-root", str(pki))
    return [
        (*common, "ca", *root, "--ca-file", "root", "--ca-name", "monky-root"),
        (*common, "intermediate", *root, "--ca-name", "root", "--intermediate-file", "int",
         "--intermediate-name", "monky-int"),
        (*common, "server", *root, "--ca-name", "int", "--server-file", "ctrl-server",
         "--server-name", "controller", "--dns", HOST, "--ip", "127.0.0.1"),
        (*common, "client", *root, "--ca-name", "int", "--client-file", "ctrl-client",
         "--key-file", "ctrl-server", "--client-name", "controller"),
    ]  # fmt: skip
