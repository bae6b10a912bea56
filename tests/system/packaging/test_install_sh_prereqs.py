"""The one-liner where a prerequisite is missing (issue 27), in real Debian 12 containers:

- a minimal Debian 12 (debootstrap minbase: no curl): the documented one-liner, run by a shell
  without `pipefail`, fails (non-zero) with curl's own line, and nothing ran;
- a version the registry does not have: its own exit status (5), not "unexpected failure" (1);
- a box whose docker has no Compose v2 plugin (the host's real docker CLI, no plugin): every run
  lists "Docker Compose v2 is not installed", with how to get it, while `docker compose` fails.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from monky_deployd_testkit.dockerlab import DOCKER
from tests.system.debian import Box, PackageRegistry
from tests.system.packaging.installsh import (
    GRANT,
    IDENTITY,
    PREPARE,
    TOKEN,
    env_for,
    one_liner_for,
    piped,
)

pytestmark = pytest.mark.docker

COMPOSE_LEFT = "Docker Compose v2 is not installed"


def test_the_one_liner_without_curl_fails_loudly(debian_image: str) -> None:
    with PackageRegistry() as server, Box(debian_image) as box:
        assert box.sh("command -v curl", check=False).returncode != 0, "the image has curl"
        script = one_liner_for(server, ["--env", "env-dev-08"])
        # `bash -c`: an operator's interactive shell, no `set -o pipefail`
        proc = box.sh(script, input=(TOKEN + "\n").encode(), check=False)
        assert proc.returncode != 0, proc.stdout + proc.stderr
        assert "curl: command not found" in proc.stderr, proc.stderr
        assert "install.sh" not in proc.stdout  # install.sh never ran
        assert box.sh("command -v monky-deployd; ls /etc/monky-deployd", check=False).stdout == ""
        assert server.requests == []


def test_a_version_the_registry_does_not_have_exits_5(pkg_image: str, built_deb: Path) -> None:
    """dist/install.sh (the release artefact) asked for 9.9.9, which the registry lacks."""
    with PackageRegistry() as server, Box(pkg_image) as box:
        box.sh(PREPARE)
        args = [
            "--env", "env-dev-08", "--base-url", server.base_url, "--version", "9.9.9",
            "--bootstrap-file", "/root/grant.jwt", "--identity-file", "/root/id.json",
        ]  # fmt: skip
        result = piped(box, args, env_for(server))
        assert result.rc == 5, result.output
        said = [ln for ln in result.stderr.splitlines() if "NO SUCH VERSION" in ln]
        assert len(said) == 1 and "9.9.9" in said[0] and "HTTP 404" in said[0], result.stderr
        assert "FAILED" not in result.stderr
        assert box.sh("dpkg-query -W monky-deployd", check=False).returncode != 0


def test_compose_v2_missing_is_listed_on_every_run(
    pkg_image: str, registry_server: PackageRegistry, built_deb: Path
) -> None:
    cli = shutil.which(DOCKER)
    assert cli, f"{DOCKER} is not on PATH (scripts/docker-up.sh)"
    with Box(pkg_image, args=("-v", f"{Path(cli).resolve()}:/usr/local/bin/docker:ro")) as box:
        box.sh(  # PREPARE without its fake docker
            f"printf %s {shlex.quote(GRANT)} > /root/grant.jwt\n"
            f"printf %s {shlex.quote(IDENTITY)} > /root/id.json"
        )
        assert box.sh("docker compose version", check=False).returncode != 0
        args = [
            "--env", "env-dev-08", "--deb", f"/dist/{built_deb.name}",
            "--bootstrap-file", "/root/grant.jwt", "--identity-file", "/root/id.json",
        ]  # fmt: skip
        for attempt in ("first", "re-run"):
            result = piped(box, args, env_for(registry_server))
            assert result.rc == 3, f"{attempt}: {result.output}"
            left = result.stderr.split("NOT FINISHED", 1)[-1]
            items = [ln for ln in left.splitlines() if ln.startswith("  - ")]
            compose = [ln for ln in items if COMPOSE_LEFT in ln]
            assert len(compose) == 1, f"{attempt}: {items}"
            for how in ("Debian 12", "Debian 13", "Ubuntu", "docker-compose-v2"):
                assert how in compose[0], compose[0]
