"""One environment's estate for tests and the demo: a Clock, a GrantIssuer, an OpenBao and a
FakeTenancy wired together, plus the config.yaml mapping that points the agent at them.

OpenBao is a FakeBao (``Estate(env)``: ``Estate[FakeBao]``), or the session's real server
(``Estate(env, real=RealBao)``: ``Estate[RealBao]``; its issuer signs the grants, on the real
clock, and its counters start at ``start()``). ``wire()`` serves the fakes in-process (an
``httpx.MockTransport``) for long simulations; with a real server there is nothing to wire.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Generic, overload

import httpx
from typing_extensions import TypeVar

from monky_deployd_testkit.fakes.clock import Clock
from monky_deployd_testkit.fakes.grant import GrantIssuer
from monky_deployd_testkit.fakes.http import mock_transport
from monky_deployd_testkit.fakes.openbao import FakeBao
from monky_deployd_testkit.fakes.tenancy import FakeTenancy
from monky_deployd_testkit.realbao import RealBao

# a bare ``Estate`` is the fake one (the default), ``Estate[RealBao]`` the real server's
B = TypeVar("B", FakeBao, RealBao, default=FakeBao)


class Estate(Generic[B]):
    bao: B

    @overload
    def __init__(
        self: Estate[FakeBao],
        env: str = ...,
        *,
        clock: Clock | None = ...,
        bao_port: int = ...,
        tenancy_port: int = ...,
        bao_kwargs: dict[str, Any] | None = ...,
        tenancy_kwargs: dict[str, Any] | None = ...,
        real: None = ...,
    ) -> None: ...

    @overload
    def __init__(
        self: Estate[RealBao],
        env: str = ...,
        *,
        clock: Clock | None = ...,
        bao_port: int = ...,
        tenancy_port: int = ...,
        bao_kwargs: dict[str, Any] | None = ...,
        tenancy_kwargs: dict[str, Any] | None = ...,
        real: RealBao,
    ) -> None: ...

    def __init__(
        self,
        env: str = "env-test-01",
        *,
        clock: Clock | None = None,
        bao_port: int = 0,
        tenancy_port: int = 0,
        bao_kwargs: dict[str, Any] | None = None,
        tenancy_kwargs: dict[str, Any] | None = None,
        real: RealBao | None = None,
    ) -> None:
        self.env = env
        self.clock = clock or Clock()
        if real is not None:
            self.issuer = real.issuer  # the real server checks times on the real clock
            self.bao = real  # type: ignore[assignment]
        else:
            self.issuer = GrantIssuer(self.clock)
            self.bao = FakeBao(  # type: ignore[assignment]
                self.issuer, self.clock, port=bao_port, **(bao_kwargs or {})
            )
        self.tenancy = FakeTenancy(
            self.bao, self.clock, env=env, port=tenancy_port, **(tenancy_kwargs or {})
        )
        self.grant = self.issuer.mint(env)

    @property
    def real(self) -> bool:
        return isinstance(self.bao, RealBao)

    def start(self) -> Estate[B]:
        if isinstance(self.bao, RealBao):
            self.bao.allow_env(self.env)
            self.bao.mark()  # the server is the session's: count from here
        else:
            self.bao.allow_env(self.env)
            self.bao.start()
        try:
            self.tenancy.start()
        except BaseException:
            if isinstance(self.bao, FakeBao):
                self.bao.stop()
            raise
        return self

    def stop(self) -> None:
        self.tenancy.stop()
        if isinstance(self.bao, FakeBao):
            self.bao.stop()
        elif self.bao.sealed:  # a test that sealed the shared server leaves it unsealed
            self.bao.sealed = False

    def __enter__(self) -> Estate[B]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wire(self) -> httpx.MockTransport:
        """Both fakes without a socket, by port (for ``run_tick(wire=)`` / ``open_client``)."""
        if not isinstance(self.bao, FakeBao):
            raise TypeError("a real OpenBao server is reached over its socket: no wire")
        return mock_transport(self.bao, self.tenancy)

    def spend_lease_budget(self, n: int | None = None) -> None:
        """Other boxes of the environment mint ``n`` leases (default: the whole budget), through
        the agent's own OpenBao and tenancy clients over real HTTP."""
        from monky_deployd import config
        from monky_deployd.adapters.net.bao import Bao
        from monky_deployd.adapters.net.tenancy import Tenancy

        with httpx.Client(trust_env=False) as client:
            bao = Bao(client, config.OpenBaoCfg(host=self.bao.host, port=self.bao.port))
            tenancy = Tenancy(
                client,
                config.TenancyCfg(host=self.tenancy.host, port=self.tenancy.port),
                self.env,
                max_body_bytes=1 << 20,
            )
            for _ in range(self.tenancy.lease_budget if n is None else n):
                tenancy.lease(bao.login_jwt(self.grant).token)

    def write_grant(self, path: Path, text: str | None = None) -> Path:
        """Write the grant (or `text`) as the kit does: JWT text plus a newline, mode 0600."""
        write_private(path, ((self.grant if text is None else text) + "\n").encode())
        return path

    def config(self, *, state_dir: Path, grant_file: Path, **overrides: Any) -> dict[str, Any]:
        """The config.yaml mapping for `transport: plain` against these fakes."""
        cfg: dict[str, Any] = {
            "env": self.env,
            "transport": "plain",
            "tenancy": {"host": self.tenancy.host, "port": self.tenancy.port},
            "openbao": {
                "host": self.bao.host,
                "port": self.bao.port,
                "jwt_mount": self.bao.jwt_mount,
                "role": self.bao.role,
                "kv_mount": self.bao.kv_mount,
            },
            "grant_file": str(grant_file),
            "state_dir": str(state_dir),
            # no metrics textfile unless a test asks: never into the machine's node-exporter dir
            "metrics": {"textfile_dir": None},
        }
        if os.environ.get("DOCKER_HOST"):  # the suite's second engine (engines.py): the agent too
            cfg["docker"] = {"host": os.environ["DOCKER_HOST"]}
        cfg.update(overrides)
        return cfg


def write_private(path: Path, data: bytes) -> None:
    """Atomically write `data` to `path` with mode 0600 (temp file in the same dir, rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
