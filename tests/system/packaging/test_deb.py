"""The .deb with real dpkg in a real Debian 12 container: user, groups, modes, ACLs (R1), units,
reinstall, upgrade, remove, purge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.system.debian import DIST, VERSION, Box

pytestmark = pytest.mark.docker

IDS = "/opt/openziti/etc/identities"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"

# The tunneler's side before the agent arrives: user/group ziti and an identity file ziti:ziti 0640.
TUNNELER_PRESENT = f"""
set -e
addgroup --quiet --system ziti
adduser --quiet --system --ingroup ziti --no-create-home ziti
install -d -o ziti -g ziti -m 0770 {IDS}
printf '{{"ztAPI":"https://ctrl.example:1280","id":{{}}}}' > {IDS}/env-dev-08.json
chown ziti:ziti {IDS}/env-dev-08.json && chmod 0640 {IDS}/env-dev-08.json
"""


def _install(box: Box, deb: Path) -> None:
    box.sh(f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /dist/{deb.name} >/dev/null")


@pytest.fixture(scope="module")
def box(pkg_image: str, built_deb: Path) -> Iterator[Box]:
    with Box(pkg_image) as b:
        b.sh(TUNNELER_PRESENT)
        b.sh(f"install -d -m 0755 {TEXTFILE_DIR}")  # prometheus-node-exporter's, root's
        _install(b, built_deb)
        yield b


def test_system_user_and_groups(box: Box) -> None:
    entry = box.sh("getent passwd monky-deployd").stdout.strip().split(":")
    assert entry[5] == "/var/lib/monky-deployd"
    assert entry[6] == "/usr/sbin/nologin"
    assert int(entry[2]) < 1000  # a system user
    groups = box.sh("id -nG monky-deployd").stdout.split()
    assert {"monky-deployd", "docker", "ziti"} <= set(groups)


def test_directory_modes(box: Box) -> None:
    out = box.sh(
        "stat -c '%n %a %U %G' /var/lib/monky-deployd /etc/monky-deployd "
        "/etc/monky-deployd/config.example.yaml /usr/lib/monky-deployd/identity-access"
    ).stdout.splitlines()
    assert out == [
        "/var/lib/monky-deployd 700 monky-deployd monky-deployd",
        "/etc/monky-deployd 750 root monky-deployd",
        "/etc/monky-deployd/config.example.yaml 644 root root",
        "/usr/lib/monky-deployd/identity-access 755 root root",
    ]


def test_identity_acls_survive_a_tunneler_rewrite(box: Box) -> None:
    """R1: default ACL on the directory, explicit ACL on the file; a rewrite (temp + rename, a
    new inode, as the tunneler does it with UMask=0007) stays readable by the agent."""
    dir_acl = box.sh(f"getfacl -cp {IDS}").stdout
    assert "default:group:ziti:r--" in dir_acl
    assert "default:user:monky-deployd:r--" in dir_acl
    assert "user:monky-deployd:r-x" in dir_acl
    file_acl = box.sh(f"getfacl -cp {IDS}/env-dev-08.json").stdout
    assert box.sh(f"stat -c %a {IDS}/env-dev-08.json").stdout == "640\n"
    assert "user:monky-deployd:r--" in file_acl and "group:ziti:r--" in file_acl
    before = box.sh(f"stat -c %i {IDS}/env-dev-08.json").stdout
    box.sh(
        "runuser -u ziti -- sh -c 'umask 0007; "
        f'printf "{{\\"ztAPI\\":\\"https://new:1280\\"}}" > {IDS}/env-dev-08.json.tmp; '
        f"mv {IDS}/env-dev-08.json.tmp {IDS}/env-dev-08.json'"
    )
    assert box.sh(f"stat -c %i {IDS}/env-dev-08.json").stdout != before  # a new inode
    assert "user:monky-deployd:r--" in box.sh(f"getfacl -cp {IDS}/env-dev-08.json").stdout
    # The grant never widens the file: group class stays read-only (effectively 0640).
    assert box.sh(f"stat -c '%a %U %G' {IDS}/env-dev-08.json").stdout == "640 ziti ziti\n"
    read = box.sh(f"runuser -u monky-deployd -- cat {IDS}/env-dev-08.json")
    assert "https://new:1280" in read.stdout


def test_the_agent_may_write_node_exporters_textfile_directory(box: Box) -> None:
    """metrics.textfile_dir: an ACL for the agent's user; the directory stays root's."""
    assert "user:monky-deployd:rwx" in box.sh(f"getfacl -cp {TEXTFILE_DIR}").stdout
    assert box.sh(f"stat -c '%U %G' {TEXTFILE_DIR}").stdout.split() == ["root", "root"]
    box.sh(f"runuser -u monky-deployd -- touch {TEXTFILE_DIR}/monky-deployd.prom")
    unit = box.sh("cat /lib/systemd/system/monky-deployd.service").stdout
    assert f"ReadWritePaths=-{TEXTFILE_DIR}" in unit


def test_installed_units_verify_clean(box: Box) -> None:
    proc = box.sh(
        "systemd-analyze verify --man=no /lib/systemd/system/monky-deployd.service "
        "/lib/systemd/system/monky-deployd.timer",
        check=False,
    )
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


def test_the_agent_runs_from_the_package_as_its_user(box: Box) -> None:
    version = box.sh("runuser -u monky-deployd -- /usr/bin/monky-deployd --version")
    assert version.stdout.strip() == f"monky-deployd {VERSION}"
    assert box.sh("readlink /opt/monky-deployd/bin/python3.11").stdout.strip() == (
        "/usr/bin/python3.11"
    )
    tick = box.sh("runuser -u monky-deployd -- monky-deployd apply --once", check=False)
    assert tick.returncode != 0
    assert "/etc/monky-deployd/config.yaml" in tick.stdout + tick.stderr


def test_dist_install_sh_defaults_to_this_release(built_deb: Path) -> None:
    text = (DIST / "install.sh").read_text()
    assert f'DEPLOYD_RELEASE_VERSION="{VERSION}"' in text
    assert built_deb.name == f"monky-deployd_{VERSION}_amd64.deb"


def _state(box: Box) -> str:
    return box.sh(
        "stat -c '%n %a %U %G' /var/lib/monky-deployd /var/lib/monky-deployd/marker "
        "/etc/monky-deployd /etc/monky-deployd/config.yaml /etc/monky-deployd/grant.jwt; "
        "id -u monky-deployd; ls /etc/systemd/system/timers.target.wants/"
    ).stdout


def test_reinstall_upgrade_remove_purge(pkg_image: str, built_deb: Path) -> None:
    with Box(pkg_image) as b:
        _install(b, built_deb)
        b.sh(
            "set -e; echo x > /var/lib/monky-deployd/marker; "
            "echo 'env: env-dev-08' > /etc/monky-deployd/config.yaml; "
            "chmod 0644 /etc/monky-deployd/config.yaml; "  # a wrong mode postinst must fix
            "echo grant > /etc/monky-deployd/grant.jwt; "
            "systemctl enable monky-deployd.timer 2>/dev/null"
        )
        b.sh(f"dpkg -i /dist/{built_deb.name} >/dev/null")  # reinstall over itself
        first = _state(b)
        assert "/etc/monky-deployd/config.yaml 640 root monky-deployd" in first
        assert "/etc/monky-deployd/grant.jwt 600 monky-deployd monky-deployd" in first
        assert "/var/lib/monky-deployd/marker" in first
        assert "monky-deployd.timer" in first

        # A real upgrade: the same package repacked as a newer version.
        b.sh(
            f"set -e; dpkg-deb -R /dist/{built_deb.name} /tmp/up; "
            f"sed -i 's/^Version: .*/Version: {VERSION}+test1/' /tmp/up/DEBIAN/control; "
            "dpkg-deb --root-owner-group -Zgzip -b /tmp/up /tmp/up.deb >/dev/null; "
            "dpkg -i /tmp/up.deb >/dev/null"
        )
        assert b.sh("dpkg-query -W -f='${Version}' monky-deployd").stdout == f"{VERSION}+test1"
        assert _state(b) == first  # state, config, grant, uid and the enabled timer all kept

        b.sh("dpkg -r monky-deployd >/dev/null")
        after_remove = b.sh(
            "ls /etc/systemd/system/timers.target.wants/; "
            "ls /var/lib/monky-deployd /etc/monky-deployd"
        ).stdout
        assert "monky-deployd.timer" not in after_remove
        assert "marker" in after_remove and "grant.jwt" in after_remove
        assert b.sh("test -e /usr/bin/monky-deployd", check=False).returncode != 0

        b.sh("dpkg -P monky-deployd >/dev/null")
        gone = b.sh("ls -d /var/lib/monky-deployd /etc/monky-deployd 2>&1", check=False).stdout
        assert gone.count("No such file or directory") == 2
        assert b.sh("getent passwd monky-deployd", check=False).returncode == 0  # user kept


def test_install_reuses_a_leftover_group_and_tolerates_no_identity_dir(
    pkg_image: str, built_deb: Path
) -> None:
    with Box(pkg_image) as b:
        b.sh("addgroup --quiet --system monky-deployd")
        _install(b, built_deb)
        assert b.sh("id -gn monky-deployd").stdout.strip() == "monky-deployd"
        assert b.sh(f"ls -d {IDS}", check=False).returncode != 0  # not created by the package
        assert {"docker", "ziti"} <= set(b.sh("id -nG monky-deployd").stdout.split())
