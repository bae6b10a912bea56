"""A loopback Docker Engine API (``docker.host: tcp://``) with no container: what a tick asks
the engine before it runs the docker CLI, for ticks whose ``docker`` is a stub.

``GET /info`` (the pre-flight: ``DockerRootDir``, the driver), ``GET /version``, and empty lists
for ``/containers/json``, ``/volumes`` and ``/networks`` (the ownership check); 404 otherwise.
The fault switches of ``LoopbackServer`` apply (``fail_next``, ``garbage``, ``slow_s``, ...).
"""

from __future__ import annotations

from pathlib import Path

from monky_deployd_testkit.fakes.http import LoopbackServer, Request, Response, json_response


class FakeEngine(LoopbackServer):
    def __init__(self, data_root: Path, version: str = "99.0.0") -> None:
        super().__init__()
        self.data_root = data_root
        self.version = version
        self.paths: list[str] = []  # every request's path, in order

    @property
    def host_url(self) -> str:
        """``docker.host`` for this engine."""
        return f"tcp://{self.host}:{self.port}"

    def record(self, req: Request) -> None:
        with self.lock:
            self.paths.append(req.path)

    def route(self, req: Request) -> Response:
        if req.path == "/info":
            return json_response(
                200,
                {
                    "DockerRootDir": str(self.data_root),
                    "Driver": "overlay2",
                    "DriverStatus": [],
                    "ServerVersion": self.version,
                },
            )
        if req.path == "/version":
            return json_response(200, {"Version": self.version, "ApiVersion": "1.41"})
        if req.path in ("/containers/json", "/networks"):
            return json_response(200, [])
        if req.path == "/volumes":
            return json_response(200, {"Volumes": [], "Warnings": []})
        return json_response(404, {"message": f"page not found: {req.path}"})
