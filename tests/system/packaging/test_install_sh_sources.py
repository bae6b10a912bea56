"""install.sh's package sources in a real Debian 12 container: https only unless --insecure-http;
the downloaded .deb verified against the release's SHA256SUMS before dpkg sees it (refused with
exit 4 on a missing SHA256SUMS, a missing entry, a different checksum: nothing installed); the
documented one-liner is the same in every document and never names the token on a command line.
Gitea's `Authorization: token` header is checked in test_install_sh.py's gitea scenario."""

from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path

import pytest

from tests.system.debian import DIST, VERSION, Box, PackageRegistry, sha256sums
from tests.system.packaging.installsh import (
    DEB,
    ONE_LINER_DOCS,
    PREPARE,
    TOKEN,
    HttpsPackageRegistry,
    documented_one_liner,
    env_for,
    make_cert,
    piped,
    publish,
    trust,
)

pytestmark = pytest.mark.docker

UNCHANGED = "dpkg-query -W monky-deployd; ls /etc/monky-deployd /var/lib/monky-deployd"


def _args(server: PackageRegistry) -> list[str]:
    return [
        "--env", "env-dev-08", "--base-url", server.base_url,
        "--bootstrap-file", "/root/grant.jwt", "--identity-file", "/root/id.json",
    ]  # fmt: skip


def _nothing_installed(box: Box) -> None:
    """dpkg never ran for the agent, and nothing after the package step happened either."""
    probe = box.sh(UNCHANGED, check=False)
    assert "no packages found matching monky-deployd" in probe.stderr, probe.stdout
    assert "cannot access '/etc/monky-deployd'" in probe.stderr
    assert box.sh("ls -d /tmp/monky-deployd-install.* 2>/dev/null", check=False).stdout == ""


def test_plain_http_is_refused_without_the_flag_before_any_request(
    pkg_image: str, registry_server: PackageRegistry
) -> None:
    """Every URL install.sh downloads from or points apt at must be https; --insecure-http is the
    one explicit way to accept plain http."""
    with Box(pkg_image) as box:
        box.sh(PREPARE)
        env = env_for(registry_server, MONKY_DEPLOYD_TOKEN=TOKEN)
        result = piped(box, _args(registry_server), env, insecure=False)
        assert result.rc == 2, result.output
        assert f"REFUSED: --base-url '{registry_server.base_url}' is not https" in result.stderr
        assert "pass --insecure-http to accept plain http" in result.stderr
        # An https source with a plain-http apt mirror is refused too, naming the variable.
        https_args = _args(registry_server)
        https_args[3] = "https://scm.example.invalid"
        result = piped(box, https_args, env, insecure=False)
        assert result.rc == 2
        assert "REFUSED: MONKY_DEPLOYD_DOCKER_APT_URL 'http://127.0.0.1:" in result.stderr
        assert registry_server.requests == []
        _nothing_installed(box)


def test_https_end_to_end_without_the_flag_and_never_a_redirect_to_http(
    tmp_path: Path, pkg_image: str, built_deb: Path
) -> None:
    """The production path: an https registry (its certificate in the box's trust store), no
    --insecure-http. A redirect of the .deb to plain http is refused (nothing fetched there,
    nothing installed); the same redirect to an https storage host is followed without the
    token, and the package is verified and installed."""
    cert, key = make_cert(tmp_path)
    with (
        HttpsPackageRegistry(cert, key, token=TOKEN) as server,
        HttpsPackageRegistry(cert, key) as storage,
        PackageRegistry() as plain,
        Box(pkg_image) as box,
    ):
        box.sh(PREPARE)
        trust(box, cert)
        deb_path = server.gitlab_path(VERSION, DEB)
        server.files[server.gitlab_path(VERSION, "SHA256SUMS")] = sha256sums(
            built_deb, DIST / "install.sh"
        )
        plain.files["/bucket/pkg.deb"] = storage.files["/bucket/pkg.deb"] = built_deb.read_bytes()
        server.redirects[deb_path] = f"{plain.url}/bucket/pkg.deb"
        env = env_for(server, MONKY_DEPLOYD_TOKEN=TOKEN)  # the apt mirrors are https too

        refused = piped(box, _args(server), env, insecure=False)
        assert refused.rc == 1, refused.output
        assert f"redirected to {plain.url}, which is not https (refused" in refused.stderr
        assert plain.requests == []
        _nothing_installed(box)

        server.redirects[deb_path] = f"{storage.url}/bucket/pkg.deb"
        done = piped(box, _args(server), env, insecure=False)
        assert done.rc == 3, done.output  # only the tunneler and systemd are left
        assert f"{DEB} matches the release's SHA256SUMS" in done.stdout
        assert box.sh("dpkg-query -W -f='${Version}' monky-deployd").stdout == VERSION
        fetched = [r for r in server.requests if r.path.startswith("/api/")]
        assert all(r.headers.get("DEPLOY-TOKEN") == TOKEN for r in fetched)
        assert [r.path for r in storage.requests] == ["/bucket/pkg.deb"]
        assert "DEPLOY-TOKEN" not in storage.requests[0].headers
        assert TOKEN not in done.output


def _other_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Each case: what the registry holds instead of the truth, the words of the refusal.
CASES = {
    "different checksum": "does not match the release's SHA256SUMS (published ",
    "truncated download": "does not match the release's SHA256SUMS (published ",
    "entry for another file only": "has no entry for " + DEB,
    "name only as a prefix": "has no entry for " + DEB,
    "no SHA256SUMS": "publishes no SHA256SUMS",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_package_that_does_not_verify_is_refused_before_dpkg(
    case: str, pkg_image: str, registry_server: PackageRegistry, built_deb: Path
) -> None:
    server = registry_server
    deb_path = publish(server, built_deb)
    sums_path = server.gitlab_path(VERSION, "SHA256SUMS")
    true_sums = server.files[sums_path]
    noise = secrets.token_bytes(64)
    if case == "different checksum":
        server.files[sums_path] = f"{_other_sha(noise)}  {DEB}\n".encode()
    elif case == "truncated download":
        server.files[deb_path] = built_deb.read_bytes()[: len(noise) * 100]
    elif case == "entry for another file only":
        server.files[sums_path] = b"".join(
            line + b"\n" for line in true_sums.splitlines() if DEB.encode() not in line
        )
        assert b"install.sh" in server.files[sums_path]
    elif case == "name only as a prefix":
        sha = hashlib.sha256(built_deb.read_bytes()).hexdigest()
        server.files[sums_path] = f"{sha}  {DEB}.asc\n{sha}  old-{DEB}\n".encode()
    else:
        del server.files[sums_path]
    with Box(pkg_image) as box:
        box.sh(PREPARE)
        result = piped(box, _args(server), env_for(server, MONKY_DEPLOYD_TOKEN=TOKEN))
        assert result.rc == 4, result.output
        refusal = [ln for ln in result.stderr.splitlines() if "REFUSED" in ln]
        assert len(refusal) == 1 and CASES[case] in refusal[0], result.stderr
        assert refusal[0].endswith("nothing was installed")
        assert "installing " + DEB not in result.stdout
        # The SHA256SUMS request carried the same token as the package's.
        fetched = [r for r in server.requests if r.path.startswith("/api/")]
        assert [r.path for r in fetched] == [deb_path, sums_path]
        assert all(r.headers.get("DEPLOY-TOKEN") == TOKEN for r in fetched)
        assert TOKEN not in result.output
        _nothing_installed(box)


def test_every_document_shows_the_same_one_liner_and_no_token_on_a_command_line() -> None:
    """The one-liner the first scenario runs (test_install_sh.py) is the one the docs show."""
    forms = {
        re.sub(r"/monky-deployd/[^/]+/install\.sh", "/monky-deployd/VER/install.sh", d)
        for d in map(documented_one_liner, ONE_LINER_DOCS)
    }
    assert len(forms) == 1, forms
    (form,) = forms
    assert "-H " not in form and "--header" not in form  # a header on argv is in ps
    pipeline = form.split("\n", 1)[1]  # after `read -rs T  # ... (sudo -i first) ...`
    assert "sudo" not in pipeline  # `sudo VAR=value bash` puts the value in sudo's argv
    assert "-K - " in form and form.startswith("read -rs T")
    assert "--proto =https" in form
    for doc in ONE_LINER_DOCS:
        text = doc.read_text(encoding="utf-8")
        assert 'curl -fsSL -H "DEPLOY-TOKEN' not in text, doc.name
