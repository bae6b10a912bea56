"""install.sh piped into bash in a real Debian 12 container, against a loopback package registry.

The box has a fake `docker` on PATH (Docker present: must be left untouched), no tunneler (its apt
repository is the loopback server, which answers 404) and, in the first scenario, no `systemctl`.
The first scenario is the documented one-liner itself (docs/packaging.md), token typed into
`read -rs T`. Source rules (https, SHA256SUMS, Gitea's header): test_install_sh_sources.py.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.system.debian import DIST, REPO, VERSION, Box, PackageRegistry, sha256sums
from tests.system.packaging.installsh import (
    DEB,
    FAKE_DOCKER,
    GITEA_DIR,
    GRANT,
    IDENTITY,
    IDS,
    PREPARE,
    TOKEN,
    Procs,
    Run,
    env_for,
    piped,
    publish,
    read_procs,
    run_one_liner,
)

pytestmark = pytest.mark.docker

# Stand-in tunneler: `enroll --jwt FILE --identity OUT` writes an identity naming the JWT.
FAKE_TUNNELER = """#!/bin/sh
[ "$1" = enroll ] && [ "$2" = --jwt ] && [ "$4" = --identity ] || exit 64
printf '{"enrolled_from":"%s"}' "$(cat "$3")" > "$5"
"""

SNAPSHOT = r"""
find /etc/monky-deployd /var/lib/monky-deployd /opt/openziti /etc/systemd/system /etc/docker \
     /opt/monky-deployd/bin /usr/local/bin /etc/apt \
     -printf '%p %m %u %g %s %T@ %i\n' 2>/dev/null | sort
getfacl -R -p /opt/openziti/etc/identities 2>/dev/null
sha256sum /etc/monky-deployd/* /opt/openziti/etc/identities/* 2>/dev/null
dpkg-query -W -f='${Version} ${Status}\n' monky-deployd
id monky-deployd
"""


@dataclass
class FirstRun:
    box: Box
    server: PackageRegistry
    run: Run
    procs: Procs


ARGS = [
    "--env",
    "env-dev-08",
    "--base-url",
    "",  # filled with the server's URL
    "--bootstrap-file",
    "/root/grant.jwt",
    "--identity-file",
    "/root/id.json",
    "--docker-data-root",
    "/srv/docker",
]


def _args(server: PackageRegistry) -> list[str]:
    args = list(ARGS)
    args[3] = server.base_url
    return args


@pytest.fixture(scope="module")
def first(pkg_image: str, built_deb: Path) -> Iterator[FirstRun]:
    """The documented one-liner (install.sh fetched with the token in a curl config on stdin, the
    token handed to bash as MONKY_DEPLOYD_TOKEN), no systemctl, no tunneler; the .deb download is
    stalled while every process's argv and environment in the box are read."""
    server = PackageRegistry().start()
    deb_path = publish(server, built_deb)
    server.files[server.gitlab_path(VERSION, "install.sh")] = (DIST / "install.sh").read_bytes()
    server.stall_path = deb_path
    box = Box(pkg_image)
    try:
        box.sh(PREPARE + "rm -f /usr/bin/systemctl /bin/systemctl")
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(run_one_liner, box, server, _args(server), env_for(server))
            assert server.stalled.wait(120), "install.sh never requested the package"
            procs = read_procs(box)
            server.release.set()
            result = future.result(timeout=600)
        yield FirstRun(box, server, result, procs)
    finally:
        box.close()
        server.stop()


def test_token_is_in_no_argv_and_no_child_environment(first: FirstRun) -> None:
    """The documented one-liner: no process in the box has the token in its argv (ps shows argv
    to every user); only the `bash install.sh` running it holds it in its environment (readable
    by root alone), and install.sh hands it to no child."""
    downloading = [cmd for cmd, _ in first.procs.entries if cmd.startswith("curl ")]
    assert downloading, "no curl process was running during the stalled download"
    assert DEB in downloading[0]
    # the one-liner's shell ran `bash install.sh` as its last command (bash execs it in place)
    assert any(cmd.startswith("bash install.sh ") for cmd, _ in first.procs.entries)
    for cmd, environ in first.procs.entries:
        assert TOKEN not in cmd, f"token in the argv of: {cmd[:80]}"
        if TOKEN in environ:  # only the shell that was started with it may carry it
            assert cmd.startswith("bash install.sh "), f"token in env of {cmd[:80]}"
    assert TOKEN not in first.run.output


def test_every_package_download_carries_the_deploy_token(first: FirstRun) -> None:
    server = first.server
    registry = [r for r in server.requests if r.path.startswith("/api/v4/")]
    assert [r.path for r in registry] == [
        server.gitlab_path(VERSION, "install.sh"),  # the one-liner's own fetch
        server.gitlab_path(VERSION, DEB),
        server.gitlab_path(VERSION, "SHA256SUMS"),
    ]
    assert all(r.headers.get("DEPLOY-TOKEN") == TOKEN for r in registry)
    assert f"monky-deployd_{VERSION}_amd64.deb matches the release's SHA256SUMS" in first.run.stdout
    others = [r for r in first.server.requests if not r.path.startswith("/api/v4/")]
    assert others, "the tunneler's repository key should have been tried"
    assert all("DEPLOY-TOKEN" not in r.headers for r in others)  # third parties never get it


def test_tunneler_and_systemctl_missing_fail_at_the_end_naming_what_is_left(
    first: FirstRun,
) -> None:
    assert first.run.rc == 3, first.run.output
    assert "FAILED" not in first.run.output
    tail = first.run.stderr.split("NOT FINISHED", 1)[1]
    assert "ziti-edge-tunnel is not installed" in tail
    assert "monky-deployd.timer not enabled or started: systemctl is not available" in tail
    assert "re-run the same command" in tail
    # ...and the warnings came before the rest was installed, not instead of it.
    assert first.run.stdout.index("wrote /etc/monky-deployd/config.yaml") >= 0


def test_everything_else_is_installed(first: FirstRun) -> None:
    box = first.box
    assert box.sh("dpkg-query -W -f='${Version}' monky-deployd").stdout == VERSION
    modes = box.sh(
        "stat -c '%n %a %U %G' /etc/monky-deployd/config.yaml /etc/monky-deployd/grant.jwt "
        f"/var/lib/monky-deployd {IDS}/env-dev-08.json"
    ).stdout.splitlines()
    assert modes == [
        "/etc/monky-deployd/config.yaml 640 root monky-deployd",
        "/etc/monky-deployd/grant.jwt 600 monky-deployd monky-deployd",
        "/var/lib/monky-deployd 700 monky-deployd monky-deployd",
        f"{IDS}/env-dev-08.json 640 root ziti",
    ]
    config = box.sh("cat /etc/monky-deployd/config.yaml").stdout
    assert "env: env-dev-08" in config and "port: 443}" in config
    assert box.sh("cat /etc/monky-deployd/grant.jwt").stdout == GRANT
    assert box.sh(f"cat {IDS}/env-dev-08.json").stdout == IDENTITY
    assert "default:group:ziti:r--" in box.sh(f"getfacl -cp {IDS}").stdout
    assert "ziti" in box.sh("id -nG monky-deployd").stdout.split()
    dropin = box.sh("cat /etc/systemd/system/ziti-edge-tunnel.service.d/10-monky-run-host.conf")
    assert (
        dropin.stdout
        == (
            REPO / "packaging/systemd/ziti-edge-tunnel.service.d/10-monky-run-host.conf"
        ).read_text()
    )
    # The agent accepts the written config as its own user (install.sh checked; check again).
    box.sh(
        "runuser -u monky-deployd -- /opt/monky-deployd/bin/python -c "
        "'from pathlib import Path; from monky_deployd.config import load; "
        'c = load(Path("/etc/monky-deployd/config.yaml")); assert c.tenancy.port == 443\''
    )
    # Existing Docker untouched: no daemon.json although --docker-data-root was given.
    assert box.sh("ls /etc/docker/daemon.json /srv/docker", check=False).returncode != 0
    assert "--docker-data-root ignored" in first.run.stderr
    assert box.sh("cat /usr/local/bin/docker").stdout == FAKE_DOCKER
    # No temporary token file left behind.
    assert box.sh("ls -d /tmp/monky-deployd-install.* 2>/dev/null", check=False).stdout == ""


def test_second_run_changes_nothing(first: FirstRun) -> None:
    box = first.box
    before = box.sh(SNAPSHOT).stdout
    requests_before = len(first.server.requests)
    again = piped(box, _args(first.server), env_for(first.server, MONKY_DEPLOYD_TOKEN=TOKEN))
    assert again.rc == 3
    assert box.sh(SNAPSHOT).stdout == before
    registry = [r for r in first.server.requests[requests_before:] if r.path.startswith("/api/")]
    assert registry == []  # the installed version is not downloaded again
    assert "already installed" in again.stdout


def test_os_release_version_never_reaches_the_url_and_xtrace_shows_no_token(
    pkg_image: str, built_deb: Path
) -> None:
    """R16 (Ubuntu 26.04's VERSION in os-release), via --source gitea and --token on the command
    line, traced with bash -x; systemctl present but systemd not running; a JWT to enrol later."""
    server = PackageRegistry().start()
    gitea_path = publish(server, built_deb, source="gitea")
    try:
        with Box(pkg_image) as box:
            box.sh(
                PREPARE + "cat > /etc/os-release <<'EOF'\n"
                'PRETTY_NAME="Ubuntu Resolute Raccoon"\nNAME="Ubuntu"\nVERSION_ID="26.04"\n'
                'VERSION="26.04 LTS (Resolute Raccoon)"\nVERSION_CODENAME=resolute\nID=ubuntu\n'
                "ID_LIKE=debian\nUBUNTU_CODENAME=resolute\nEOF\n"
                "echo enrol.jwt.body > /root/enrol.jwt"
            )
            args = [
                "--env", "env-qa-02", "--source", "gitea", "--base-url", server.base_url,
                "--token", TOKEN, "--bootstrap-file", "/root/grant.jwt",
                "--identity-jwt", "/root/enrol.jwt",
            ]  # fmt: skip
            result = piped(box, args, env_for(server), bash="bash -x -s")
            releases = [r for r in server.requests if "releases" in r.path]
            assert [r.path for r in releases] == [gitea_path, f"{GITEA_DIR}/SHA256SUMS"]
            # Gitea takes an access token as `Authorization: token <t>`; never GitLab's header.
            assert [r.headers.get("Authorization") for r in releases] == [f"token {TOKEN}"] * 2
            assert all("DEPLOY-TOKEN" not in r.headers for r in server.requests)
            others = [r for r in server.requests if "releases" not in r.path]
            assert others and all("Authorization" not in r.headers for r in others)
            assert "Resolute" not in " ".join(r.path for r in server.requests)
            assert TOKEN not in result.output
            assert GRANT not in result.output
            assert result.rc == 3, result.output
            assert "monky-deployd.timer not started: systemd is not running" in result.stderr
            assert "Ziti identity not enrolled yet" in result.stderr
            assert box.sh("stat -c '%a %U' /etc/monky-deployd/identity-enrolment.jwt").stdout == (
                "600 root\n"
            )
            # enabled offline, so it starts on the next boot with systemd
            assert box.sh("test -L /etc/systemd/system/timers.target.wants/monky-deployd.timer")

            # R15: the tunneler arrives later; the same command, with the kit's files gone,
            # enrols the kept JWT (no new kit needed).
            box.sh(
                "rm /root/grant.jwt /root/enrol.jwt; mkdir -p /opt/openziti/bin; "
                f"printf %s {shlex.quote(FAKE_TUNNELER)} > /opt/openziti/bin/ziti-edge-tunnel; "
                "chmod 0755 /opt/openziti/bin/ziti-edge-tunnel"
            )
            rerun = [a for a in args if a not in ("--bootstrap-file", "/root/grant.jwt")]
            rerun = [a for a in rerun if a not in ("--identity-jwt", "/root/enrol.jwt")]
            again = piped(box, rerun, env_for(server))
            assert "identity enrolled into /opt/openziti/etc/identities/env-qa-02.json" in (
                again.stdout
            ), again.output
            assert (
                box.sh(f"cat {IDS}/env-qa-02.json").stdout == '{"enrolled_from":"enrol.jwt.body"}'
            )
            assert box.sh(f"stat -c '%a %G' {IDS}/env-qa-02.json").stdout == "640 ziti\n"
            assert "user:monky-deployd:r--" in box.sh(f"getfacl -cp {IDS}/env-qa-02.json").stdout
            assert box.sh("ls /etc/monky-deployd/identity-enrolment.jwt", check=False).returncode
            left = again.stderr.split("NOT FINISHED")[1]
            assert "not enrolled" not in left and "ziti-edge-tunnel is not installed" not in left
            assert "systemd is not running" in left
            assert again.rc == 3
    finally:
        server.stop()


def test_piped_without_a_grant_is_refused_before_any_change(
    pkg_image: str, registry_server: PackageRegistry
) -> None:
    with Box(pkg_image) as box:
        box.sh(PREPARE)
        args = ["--env", "env-dev-08", "--base-url", registry_server.base_url, "--version", VERSION]
        result = piped(box, args, env_for(registry_server, MONKY_DEPLOYD_TOKEN=TOKEN))
        assert result.rc == 2
        assert "pass --bootstrap-file FILE" in result.stderr
        assert registry_server.requests == []
        installed = box.sh("dpkg-query -W monky-deployd", check=False)
        assert installed.returncode != 0
        assert box.sh("ls /etc/monky-deployd", check=False).returncode != 0
        # A version with spaces (what sourcing os-release once produced) is refused outright.
        bad = [
            "--env", "env-dev-08", "--base-url", registry_server.base_url,
            "--version", "26.04 LTS (Resolute Raccoon)", "--bootstrap-file", "/root/grant.jwt",
        ]  # fmt: skip
        result = piped(box, bad, env_for(registry_server))
        assert result.rc == 2 and "is not a package version" in result.stderr
        assert registry_server.requests == []


def test_absent_docker_is_installed_with_the_data_root_placed_first(
    pkg_image: str, registry_server: PackageRegistry, built_deb: Path
) -> None:
    """R17: no Docker on the box; Docker's apt repository is not usable (the loopback mirror
    answers 404), so the distribution's docker.io is installed, with --docker-data-root written
    to daemon.json before the package (and so its first start) arrived.
    The registry redirects the download to object storage on another origin (as GitLab does):
    the DEPLOY-TOKEN must not follow it there."""
    with PackageRegistry() as storage, Box(pkg_image) as box:
        storage.files["/bucket/pkg.deb"] = built_deb.read_bytes()
        registry_server.redirects[registry_server.gitlab_path(VERSION, DEB)] = (
            f"http://127.0.0.1:{storage.port}/bucket/pkg.deb"
        )
        registry_server.files[registry_server.gitlab_path(VERSION, "SHA256SUMS")] = sha256sums(
            built_deb
        )
        box.sh(f"printf %s {shlex.quote(GRANT)} > /root/grant.jwt")
        assert box.sh("command -v docker dockerd", check=False).stdout == ""
        args = [
            "--env", "env-dev-08", "--base-url", registry_server.base_url,
            "--bootstrap-file", "/root/grant.jwt", "--docker-data-root", "/srv/docker",
        ]  # fmt: skip
        result = piped(box, args, env_for(registry_server, MONKY_DEPLOYD_TOKEN=TOKEN))
        assert "installing the distribution's docker.io" in result.stderr, result.output
        registry = [r for r in registry_server.requests if r.path.startswith("/api/")]
        assert [r.path.rsplit("/", 1)[1] for r in registry] == [DEB, "SHA256SUMS"]
        assert [r.headers.get("DEPLOY-TOKEN") for r in registry] == [TOKEN, TOKEN]
        assert [r.path for r in storage.requests] == ["/bucket/pkg.deb"]
        assert "DEPLOY-TOKEN" not in storage.requests[0].headers
        assert box.sh("dpkg-query -W -f='${Status}' docker.io").stdout == "install ok installed"
        assert box.sh("cat /etc/docker/daemon.json").stdout == (
            '{\n  "data-root": "/srv/docker"\n}\n'
        )
        first_written = box.sh(
            "stat -c %Y /etc/docker/daemon.json; stat -c %Y /var/lib/dpkg/info/docker.io.list"
        ).stdout.split()
        assert int(first_written[0]) <= int(first_written[1])
        # The failed Docker repository is not left behind to break later apt-get updates.
        assert box.sh("ls /etc/apt/sources.list.d/docker.list", check=False).returncode != 0
        tried = [r for r in registry_server.requests if r.path.startswith("/docker/")]
        assert [r.path for r in tried] == ["/docker/linux/debian/gpg"]
        assert "DEPLOY-TOKEN" not in tried[0].headers
        assert "docker" in box.sh("id -nG monky-deployd").stdout.split()
        # Debian 12 has no Compose v2 package: named as left, with the rest installed.
        assert result.rc == 3
        assert "Docker Compose v2 is not installed" in result.stderr.split("NOT FINISHED")[1]


def test_local_deb_installs_without_any_download_and_once(
    pkg_image: str, registry_server: PackageRegistry, built_deb: Path
) -> None:
    with Box(pkg_image) as box:
        box.sh(PREPARE)
        args = [
            "--env", "env-dev-08", "--deb", f"/dist/{built_deb.name}",
            "--bootstrap-file", "/root/grant.jwt", "--identity-file", "/root/id.json",
        ]  # fmt: skip
        first = piped(box, args, env_for(registry_server))
        assert box.sh("dpkg-query -W -f='${Version}' monky-deployd").stdout == VERSION
        assert not [r for r in registry_server.requests if r.path.startswith("/api/")]
        assert first.rc == 3 and "FAILED" not in first.output  # only the tunneler/systemd left
        again = piped(box, args, env_for(registry_server))
        assert f"monky-deployd {VERSION} already installed" in again.stdout
