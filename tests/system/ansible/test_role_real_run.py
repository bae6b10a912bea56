"""The monky_deployd role, run for real with ansible-playbook against a real Debian container.

ansible-playbook runs on this machine with the community.docker.docker connection (docker exec);
the container shares the host network, so the role downloads the .deb from a loopback package
server that records every request's headers. Checks: the DEPLOY-TOKEN header arrives on every
download, neither the token nor the grant appears in ansible's output, the box ends up as the
role promises (package, config.yaml valid against the real config schema, grant 0600, groups,
default ACL surviving a tunneler-style rewrite), and a second run reports changed=0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import subprocess
from pathlib import Path

import pytest
import yaml

from monky_deployd import __version__
from monky_deployd.config import parse
from tests.system.debian import REPO, Box, PackageRegistry, sha256sums

pytestmark = pytest.mark.docker

VENV_BIN = REPO / ".venv" / "bin"
RECAP = re.compile(
    r"^target\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)
ENV_ID = "env-dev-08"
IDENTITY_DIR = "/opt/openziti/etc/identities"


def _playbook(
    inventory: Path, extra_vars: Path, home: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
    env = dict(
        os.environ,
        PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        ANSIBLE_HOME=str(home),
        ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_STDOUT_CALLBACK="default",
    )
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-vvv",  # module arguments (headers included) appear unless no_log
            "-i",
            str(inventory),
            "-e",
            f"@{extra_vars}",
            str(REPO / "ansible" / "site.yml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    match = RECAP.search(proc.stdout)
    assert match, f"no PLAY RECAP for target:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    ok, changed, unreachable, failed = (int(g) for g in match.groups())
    return proc, {"ok": ok, "changed": changed, "unreachable": unreachable, "failed": failed}


def test_role_installs_the_agent_and_a_second_run_changes_nothing(
    tmp_path: Path, debian_image: str, built_deb: Path
) -> None:
    deb = built_deb
    arch = deb.stem.rsplit("_", 1)[1]
    prefix = "/generic/monky-deployd"

    token = f"glpat-{secrets.token_hex(12)}"
    grant = f"eyJhbGciOiJSUzI1NiJ9.{secrets.token_hex(24)}.{secrets.token_hex(16)}"

    with PackageRegistry(token) as server, Box(debian_image) as box:
        server.files[f"{prefix}/{__version__}/{deb.name}"] = deb.read_bytes()
        server.files[f"{prefix}/{__version__}/SHA256SUMS"] = sha256sums(deb)
        # Ansible needs python3 on the target; everything else is the role's job.
        box.check(
            "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null;"
            " apt-get install -y -qq --no-install-recommends python3 >/dev/null",
            timeout=600,
        )
        # An identity enrolled before the role runs: a directory and file the agent cannot read.
        box.check(
            f"install -d -m 0750 {IDENTITY_DIR};"
            f" echo '{{\"v\":1}}' > {IDENTITY_DIR}/{ENV_ID}.json;"
            f" chmod 0640 {IDENTITY_DIR}/{ENV_ID}.json"
        )
        inventory = tmp_path / "inventory.ini"
        inventory.write_text(
            "[monky_deployd]\n"
            f"target ansible_connection=community.docker.docker ansible_host={box.name}"
            " ansible_python_interpreter=/usr/bin/python3 ansible_become=false\n"
        )
        extra = tmp_path / "vars.json"
        extra.write_text(
            json.dumps(
                {
                    "monky_deployd_env": ENV_ID,
                    "monky_deployd_version": __version__,
                    "monky_deployd_base_url": server.base_url + prefix,
                    "monky_deployd_download_token": token,
                    "monky_deployd_grant": grant + "\n",
                    "monky_deployd_manage_service": False,
                    # The loopback server speaks plain http; the role refuses it otherwise.
                    "monky_deployd_allow_insecure_http": True,
                }
            )
        )
        extra.chmod(0o600)
        home = tmp_path / "ansible-home"
        (home / "tmp").mkdir(parents=True)

        first, recap1 = _playbook(inventory, extra, home)
        assert recap1["failed"] == 0 and recap1["unreachable"] == 0, first.stdout[-6000:]
        assert recap1["changed"] > 0

        # The download carried the token in the DEPLOY-TOKEN header, and only there; the release's
        # SHA256SUMS was fetched first, with the same header (get_url's checksum).
        seen = server.requests
        deb_path = f"/generic/monky-deployd/{__version__}/monky-deployd_{__version__}_{arch}.deb"
        sums_path = f"/generic/monky-deployd/{__version__}/SHA256SUMS"
        gets = [r for r in seen if r.method == "GET"]
        assert [r.path for r in gets] == [sums_path, deb_path]
        assert all(r.headers.get("deploy-token") == token for r in seen)
        assert all(token not in r.path for r in seen)
        for out in (first.stdout, first.stderr):
            assert token not in out
            assert grant not in out

        # The package is installed, the agent user is in docker and ziti.
        status = box.check("dpkg-query -W -f='${Status} ${Version}' monky-deployd")
        assert status == f"install ok installed {__version__}"
        groups = box.check("id -nG monky-deployd").split()
        assert {"docker", "ziti"} <= set(groups)

        # config.yaml: root:monky-deployd 0640, valid against the agent's real schema, port 443.
        assert box.check("stat -c '%U:%G %a' /etc/monky-deployd/config.yaml").strip() == (
            "root:monky-deployd 640"
        )
        cfg = parse(yaml.safe_load(box.check("cat /etc/monky-deployd/config.yaml")), "config.yaml")
        assert cfg.env == ENV_ID
        assert cfg.tenancy.port == 443
        assert str(cfg.identity_path) == f"{IDENTITY_DIR}/{ENV_ID}.json"
        assert str(cfg.state_dir) == "/var/lib/monky-deployd"

        # The grant: monky-deployd 0600, the JWT as text.
        assert box.check("stat -c '%U %a' /etc/monky-deployd/grant.jwt").strip() == (
            "monky-deployd 600"
        )
        assert box.check("cat /etc/monky-deployd/grant.jwt") == grant + "\n"
        assert box.check("stat -c '%U %a' /var/lib/monky-deployd").strip() == "monky-deployd 700"

        # R1: the agent user reads the existing identity (explicit ACL, directory traverse).
        assert box.check(f"runuser -u monky-deployd -- cat {IDENTITY_DIR}/{ENV_ID}.json") == (
            '{"v":1}\n'
        )

        # Second run: nothing changes, nothing is downloaded again.
        second, recap2 = _playbook(inventory, extra, home)
        assert recap2["failed"] == 0, second.stdout[-6000:]
        assert recap2["changed"] == 0, second.stdout[-6000:]
        assert [r.path for r in server.requests if r.method == "GET"] == [sums_path, deb_path]
        assert token not in second.stdout and grant not in second.stdout

        # With the timer managed (the default), a host without systemd is refused by name.
        managed = tmp_path / "managed.json"
        managed.write_text(
            json.dumps({**json.loads(extra.read_text()), "monky_deployd_manage_service": True})
        )
        third, recap3 = _playbook(inventory, managed, home)
        assert recap3["failed"] == 1 and recap3["changed"] == 0, third.stdout[-6000:]
        assert "the service manager of this host is 'sleep', not systemd" in third.stdout
        assert token not in third.stdout and grant not in third.stdout

        # R1: the default ACL carries the agent's read grant to the file the tunneler rewrites
        # (write a temp file, rename over the original: a new inode, the explicit ACL is gone).
        acl = box.check(f"getfacl -p {IDENTITY_DIR}")
        assert "default:user:monky-deployd:r--" in acl
        assert "user:monky-deployd:r-x" in acl
        box.check(
            f"cd {IDENTITY_DIR}; umask 077; echo '{{\"v\":2}}' > {ENV_ID}.json.tmp;"
            f" chown root:ziti {ENV_ID}.json.tmp; chmod 0640 {ENV_ID}.json.tmp;"
            f" mv {ENV_ID}.json.tmp {ENV_ID}.json"
        )
        assert box.check(f"runuser -u monky-deployd -- cat {IDENTITY_DIR}/{ENV_ID}.json") == (
            '{"v":2}\n'
        )


def _vars(path: Path, base: Path, **changes: object) -> Path:
    path.write_text(json.dumps({**json.loads(base.read_text()), **changes}))
    path.chmod(0o600)
    return path


def test_role_refuses_plain_http_and_a_deb_that_does_not_match_sha256sums(
    tmp_path: Path, debian_image: str, built_deb: Path
) -> None:
    """The https rule (before any request), and Gitea's header shape on a release whose
    SHA256SUMS lists another sum for the .deb: the download fails with the reason named, the
    .deb never reaches apt, the token appears nowhere in the output."""
    token = f"gitea-{secrets.token_hex(16)}"
    version = f"{__version__}+bad{secrets.token_hex(2)}"
    deb_name = f"monky-deployd_{version}_amd64.deb"
    releases = "/monky/monky-deployd/releases/download"
    with PackageRegistry(token) as server, Box(debian_image) as box:
        server.auth = "gitea"
        server.files[f"{releases}/v{version}/{deb_name}"] = built_deb.read_bytes()
        wrong = hashlib.sha256(secrets.token_bytes(32)).hexdigest()
        server.files[f"{releases}/v{version}/SHA256SUMS"] = f"{wrong}  {deb_name}\n".encode()
        box.check(
            "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null;"
            " apt-get install -y -qq --no-install-recommends python3 >/dev/null",
            timeout=600,
        )
        inventory = tmp_path / "inventory.ini"
        inventory.write_text(
            "[monky_deployd]\n"
            f"target ansible_connection=community.docker.docker ansible_host={box.name}"
            " ansible_python_interpreter=/usr/bin/python3 ansible_become=false\n"
        )
        base = tmp_path / "base.json"
        base.write_text(
            json.dumps(
                {
                    "monky_deployd_env": ENV_ID,
                    "monky_deployd_version": version,
                    "monky_deployd_source": "gitea",
                    "monky_deployd_base_url": server.base_url + releases,
                    "monky_deployd_deb_arch": "amd64",
                    "monky_deployd_download_token": token,
                    "monky_deployd_grant": "eyJ.grant.sig\n",
                    "monky_deployd_manage_service": False,
                }
            )
        )
        home = tmp_path / "ansible-home"
        (home / "tmp").mkdir(parents=True)

        plain, recap = _playbook(inventory, _vars(tmp_path / "plain.json", base), home)
        assert recap["failed"] == 1 and recap["changed"] == 0, plain.stdout[-6000:]
        assert "must be https URLs: the package is installed as root" in plain.stdout
        assert "monky_deployd_allow_insecure_http: true" in plain.stdout
        assert server.requests == []

        lab = _vars(tmp_path / "lab.json", base, monky_deployd_allow_insecure_http=True)
        bad, recap = _playbook(inventory, lab, home)
        assert recap["failed"] == 1, bad.stdout[-6000:]
        assert f"monky-deployd {version} was not installed" in bad.stdout
        assert "did not match" in bad.stdout and "check monky_deployd_version" in bad.stdout
        gets = [r for r in server.requests if r.method == "GET"]
        assert [r.path.rsplit("/", 1)[1] for r in gets] == ["SHA256SUMS", deb_name]
        assert all(r.headers.get("Authorization") == f"token {token}" for r in gets)
        assert all("DEPLOY-TOKEN" not in r.headers for r in gets)
        assert token not in bad.stdout and token not in bad.stderr
        probe = box.sh("dpkg-query -W monky-deployd; ls /var/cache/monky-deployd", check=False)
        assert "no packages found matching monky-deployd" in probe.stderr
        assert deb_name not in probe.stdout

        # A SHA256SUMS that lists other files only: refused as well, naming the missing entry.
        right = hashlib.sha256(built_deb.read_bytes()).hexdigest()
        server.files[f"{releases}/v{version}/SHA256SUMS"] = (
            f"{right}  old-{deb_name}\n{right}  {deb_name}.asc\n".encode()
        )
        missing, recap = _playbook(inventory, lab, home)
        assert recap["failed"] == 1, missing.stdout[-6000:]
        assert f"Unable to find a checksum for file '{deb_name}'" in missing.stdout
        assert token not in missing.stdout and token not in missing.stderr
        probe = box.sh("dpkg-query -W monky-deployd; ls /var/cache/monky-deployd", check=False)
        assert "no packages found matching monky-deployd" in probe.stderr
        assert deb_name not in probe.stdout
