"""The local policy's facts from the real engine (issue 40): ``docker_api.resource_objects`` says
whose a volume, network or container name is (compose's project label, none: made by hand,
absent: the engine has none, an ID prefix is no name), and ``agent.policy.names_now`` asks once
per name (a counting loopback Engine API) and refuses when the engine does not answer."""

from __future__ import annotations

import json
import os
import socketserver
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest

from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.agent import policy
from monky_deployd.config import Config, DockerCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd_testkit.dockerlab import ensure_busybox_image

LABEL = "com.docker.compose.project"


def owners(cfg: DockerCfg, kind: str, name: str) -> list[str | None]:
    """Whose each object of that name is (its project label; None: none)."""
    return docker_api.owners(kind, docker_api.resource_objects(cfg, kind, name))


def docker(*args: str) -> str:
    return subprocess.run(("docker", *args), capture_output=True, text=True, check=True).stdout


def config(tmp: Path, host: str | None, **allow: list[str]) -> Config:
    return Config.model_validate(
        {
            "env": "env-test",
            "state_dir": str(tmp / "state"),
            "docker": {"host": host},
            "policy": {"allow": allow},
        }
    )


@pytest.fixture
def name() -> Iterator[str]:
    """A name of this test's own; every volume, network and container of it removed after."""
    own = "names" + uuid.uuid4().hex[:10]
    yield own
    subprocess.run(("docker", "rm", "-f", own), capture_output=True, check=False)
    subprocess.run(("docker", "volume", "rm", "-f", own), capture_output=True, check=False)
    subprocess.run(("docker", "network", "rm", own), capture_output=True, check=False)


@pytest.mark.docker
def test_whose_volume_network_and_container_the_real_engine_says(name: str) -> None:
    cfg = DockerCfg(host=os.environ.get("DOCKER_HOST"))  # the suite's second engine too
    for kind in ("volume", "network", "container"):
        assert owners(cfg, kind, name) == []
    docker("volume", "create", "--label", f"{LABEL}=shop", name)
    assert owners(cfg, "volume", name) == ["shop"]
    docker("network", "create", name)
    assert owners(cfg, "network", name) == [None]
    assert owners(cfg, "network", name[:-1]) == []  # a prefix: none
    cid = docker("create", "--name", name, ensure_busybox_image(), "true").strip()
    assert owners(cfg, "container", name) == [None]
    # the engine answers GET /containers/<id prefix>/json too: an ID prefix is no name
    assert owners(cfg, "container", cid[:12]) == []


class _Handler(BaseHTTPRequestHandler):
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.paths.append(self.path)
        if self.path.startswith("/networks"):
            body, status = json.dumps([{"Name": "shop_default", "Labels": {LABEL: "crm"}}]), 200
        else:
            body, status = json.dumps({"message": "no such"}), 404
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def address_string(self) -> str:
        return "unix"

    def log_message(self, format: str, *args: Any) -> None:
        pass


MODEL: dict[str, object] = {
    "name": "shop",
    "services": {
        "web": {
            "image": "x",
            "container_name": "shop-web",
            "volumes": [{"type": "volume", "source": "data", "target": "/d"}],
            "networks": {"default": None},
        },
        "db": {"image": "x", "volumes": [{"type": "volume", "source": "data", "target": "/d"}]},
    },
    "volumes": {"data": {"name": "shop_data"}},
    "networks": {"default": {"name": "shop_default"}},
}


def test_names_now_asks_once_per_name_and_refuses_what_is_another_projects(
    tmp_path: Path,
) -> None:
    sock = tmp_path / "engine.sock"
    handler: type[_Handler] = type("Handler", (_Handler,), {"paths": []})
    server = socketserver.ThreadingUnixStreamServer(str(sock), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        found = policy.names_now(config(tmp_path, f"unix://{sock}"), MODEL, "shop")
        assert [p.partition("?")[0] for p in sorted(handler.paths)] == [
            "/containers/shop-web/json",
            "/networks",
            "/volumes/shop_data",
        ]  # one GET per name: no /info, no list of every volume
        assert [(v.code, v.key, v.service) for v in found] == [
            (Code.POLICY_FOREIGN_RESOURCE, "networks.default", "web")
        ]
        assert "the network shop_default already exists and is project crm's" in found[0].line()
        allowed = config(tmp_path, f"unix://{sock}", networks=["shop_default"])
        assert policy.names_now(allowed, MODEL, "shop") == []
    finally:
        server.shutdown()
        server.server_close()


def test_an_engine_that_does_not_answer_refuses_the_release(tmp_path: Path) -> None:
    cfg = config(tmp_path, f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(DeployError) as caught:
        policy.names_now(cfg, MODEL, "shop")
    err = caught.value
    assert err.code is Code.DOCKER_UNAVAILABLE and err.outcome == "refused"
    assert err.message.startswith("the local policy cannot learn from the Docker engine whose ")
    assert "so the release is not run" in err.message


@pytest.mark.docker
def test_the_projects_own_volume_and_network_defined_otherwise_are_drift(
    tmp_path: Path, name: str
) -> None:
    """Issue 45: a volume and a network of the project the real engine already has, compared
    with the model as the engine reports them (``core.admission.reading.drift``)."""
    cfg = config(tmp_path, os.environ.get("DOCKER_HOST"))
    docker(
        *("volume", "create", "--label", f"{LABEL}=shop", "--label", "k=1"),
        *("--label", "com.docker.compose.volume=data", "--opt", "type=tmpfs"),
        *("--opt", "device=tmpfs", "--opt", "o=size=1m", name),
    )
    docker(
        *("network", "create", "--label", f"{LABEL}=shop"),
        *("--label", "com.docker.compose.network=back", name),
    )
    opts = {"type": "tmpfs", "device": "tmpfs", "o": "size=1m"}
    model: dict[str, object] = {
        "name": "shop",
        "services": {"web": {"image": "x"}},
        "volumes": {"data": {"name": name, "driver_opts": opts, "labels": {"k": "1"}}},
        "networks": {"back": {"name": name}},
    }
    assert policy.names_now(cfg, model, "shop") == []  # as made: the project's own, no drift
    changed = json.loads(json.dumps(model))
    changed["volumes"]["data"]["driver_opts"]["o"] = "size=2m"
    changed["networks"]["back"]["internal"] = True
    found = policy.names_now(cfg, changed, "shop")
    assert [(v.code, v.key) for v in found] == [
        (Code.POLICY_RESOURCE_DRIFT, "networks.back"),
        (Code.POLICY_RESOURCE_DRIFT, "volumes.data"),
    ]
    assert "internal False on the engine, True in the model" in found[0].asks
    assert "'o': 'size=1m'" in found[1].asks and "'o': 'size=2m'" in found[1].asks
