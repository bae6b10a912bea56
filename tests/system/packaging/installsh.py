"""What the install.sh suites share: the box's preparation, running install.sh piped into bash
(plainly, or as the documented one-liner), publishing a release on the loopback registry (the .deb
and its SHA256SUMS, written by the real `sha256sum`, the tool the CI release jobs run), and reading
every process's argv and environment while a download is stalled."""

from __future__ import annotations

import re
import shlex
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from tests.system.debian import DIST, REPO, VERSION, Box, PackageRegistry, sha256sums

TOKEN = "glpat-Dq7sEcReT-xyzzy-4242"
GRANT = "eyJhbGciOiJSUzI1NiJ9.eyJlbnYiOiJlbnYtZGV2LTA4In0.c2lnbmF0dXJl"
IDENTITY = '{"ztAPI":"https://ctrl.example:1280","id":{"cert":"pem:x","key":"pem:y","ca":"pem:z"}}'
DEB = f"monky-deployd_{VERSION}_amd64.deb"
IDS = "/opt/openziti/etc/identities"
GITEA_DIR = f"/monky/monky-deployd/releases/download/v{VERSION}"

# Docker present, with the Compose v2 plugin (install.sh asks `docker compose version --short`).
FAKE_DOCKER = (
    "#!/bin/sh\n"
    '[ "$1 $2 $3" = "compose version --short" ] && { echo 2.29.7; exit 0; }\n'
    "echo 'Docker version 29.0.1, build fake'\n"
)
PREPARE = f"""
set -e
printf %s {shlex.quote(FAKE_DOCKER)} > /usr/local/bin/docker && chmod 0755 /usr/local/bin/docker
printf %s {shlex.quote(GRANT)} > /root/grant.jwt
printf %s {shlex.quote(IDENTITY)} > /root/id.json
"""


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def env_for(server: PackageRegistry, **extra: str) -> dict[str, str]:
    """The third-party repositories (Docker's, OpenZiti's) point at the loopback server."""
    return {
        "MONKY_DEPLOYD_ZITI_KEY_URL": f"{server.base_url}/ziti/package-repos.gpg",
        "MONKY_DEPLOYD_ZITI_APT_URL": f"{server.base_url}/ziti/apt",
        "MONKY_DEPLOYD_DOCKER_APT_URL": f"{server.base_url}/docker/linux",
        **extra,
    }


def piped(
    box: Box, args: list[str], env: dict[str, str], bash: str = "bash -s", insecure: bool = True
) -> Run:
    """dist/install.sh (the release artefact build-deb.sh wrote) piped into bash in the box. The
    loopback registry speaks plain http, so `--insecure-http` is passed unless `insecure` is
    False."""
    script = (DIST / "install.sh").read_bytes()
    argv = [*args, "--insecure-http"] if insecure else args
    proc = box.sh(f"{bash} -- {shlex.join(argv)}", input=script, env=env, check=False, timeout=600)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def publish(server: PackageRegistry, deb: Path, *, source: str = "gitlab") -> str:
    """Put the .deb and its SHA256SUMS (beside it, as the release jobs do) on the registry;
    returns the .deb's path."""
    if source == "gitlab":
        deb_path = server.gitlab_path(VERSION, deb.name)
        sums_path = server.gitlab_path(VERSION, "SHA256SUMS")
    else:
        deb_path, sums_path = f"{GITEA_DIR}/{deb.name}", f"{GITEA_DIR}/SHA256SUMS"
    server.files[deb_path] = deb.read_bytes()
    server.files[sums_path] = sha256sums(deb, DIST / "install.sh")
    return deb_path


# -- the documented one-liner -------------------------------------------------------------------

ONE_LINER_DOCS = (REPO / "docs" / "packaging.md", REPO / "OPERATIONS.md")


def documented_one_liner(doc: Path = ONE_LINER_DOCS[0]) -> str:
    """The fenced one-liner of ``doc``: from `read -rs T` to its last continued line."""
    text = doc.read_text(encoding="utf-8")
    match = re.search(r"^read -rs T\b[^\n]*\n(?:[^\n]*\\\n)*[^\n]*\n", text, re.M)
    assert match, f"{doc.name} shows no one-liner starting with `read -rs T`"
    return match.group(0)


def one_liner_for(server: PackageRegistry, args: list[str]) -> str:
    """The documented one-liner with its URL pointed at the loopback registry (plain http: the
    `=https` protocol limits become `=http`) and the kit's arguments replaced by ``args``."""
    doc = documented_one_liner()
    head, sep, _ = doc.partition("bash install.sh ")
    assert sep, "the documented one-liner does not run `bash install.sh` (downloaded to a file)"
    head = head.replace("https://scm.tikali.ai", server.base_url).replace("<ver>", VERSION)
    head = head.replace("=https", "=http")
    return head + sep + shlex.join([*args, "--insecure-http"]) + "\n"


def run_one_liner(box: Box, server: PackageRegistry, args: list[str], env: dict[str, str]) -> Run:
    """The documented form as an operator runs it: the token typed into `read -rs T` (here: the
    first line of stdin), nowhere else."""
    proc = box.sh(
        one_liner_for(server, args),
        input=(TOKEN + "\n").encode(),
        env=env,
        check=False,
        timeout=600,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


# -- processes ----------------------------------------------------------------------------------


@dataclass
class Procs:
    """cmdline and environ of every process in the box, read while the download was stalled."""

    entries: list[tuple[str, str]]


def read_procs(box: Box) -> Procs:
    out = box.sh(
        "for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null; printf '\\n@@ENV@@\\n'; "
        "cat $p/environ 2>/dev/null; printf '\\n@@END@@\\n'; done"
    ).stdout
    entries = []
    for chunk in out.split("\n@@END@@\n"):
        if "\n@@ENV@@\n" in chunk:
            cmd, environ = chunk.split("\n@@ENV@@\n", 1)
            entries.append((cmd.replace("\0", " ").strip(), environ))
    return Procs(entries)


# -- https --------------------------------------------------------------------------------------


def make_cert(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl), valid for a day: (cert, key)."""
    cert, key = folder / "registry.crt", folder / "registry.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    return cert, key


def trust(box: Box, cert: Path) -> None:
    """Install ``cert`` in the box's system trust store (update-ca-certificates): curl and apt
    then accept the https registry as they would a real one."""
    pem = cert.read_text()
    box.check(
        f"printf %s {shlex.quote(pem)} > /usr/local/share/ca-certificates/monky-test.crt\n"
        "update-ca-certificates >/dev/null 2>&1"
    )


class HttpsPackageRegistry(PackageRegistry):
    """The package registry behind TLS (the certificate of make_cert()): https://127.0.0.1:<port>."""

    def __init__(self, cert: Path, key: Path, token: str | None = None) -> None:
        super().__init__(token)
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(cert, key)

    def start(self) -> Self:
        super().start()
        server = self._server
        assert server is not None
        # Same file descriptor: the serving loop now accepts TLS connections.
        server.socket = self._tls.wrap_socket(server.socket, server_side=True)
        return self

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"
