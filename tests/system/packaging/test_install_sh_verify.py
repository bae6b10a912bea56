"""install.sh's SHA256SUMS check as a class of inputs (no container): the script's own
`verify_package`, sourced into bash, downloads a generated SHA256SUMS from a loopback registry and
judges a file against it. It accepts exactly when the lines naming the file (`<sum>  <name>` or
`<sum> *<name>`, as sha256sum writes them) all give the file's sum; anything else is exit 4 with a
sentence saying which, and never a partial match on a name that merely contains the file's."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.system.debian import REPO, PackageRegistry

INSTALL_SH = REPO / "packaging" / "install.sh"
NAME = "monky-deployd_9.8.7_amd64.deb"
BODY = b"not really a deb\n" * 7
TRUE_SUM = hashlib.sha256(BODY).hexdigest()
SUMS_PATH = "/rel/SHA256SUMS"

HARNESS = r"""
source <(sed '/^main "\$@"$/d' "$1")
DEPLOYD_TMP="$(mktemp -d)"
trap 'rm -rf "$DEPLOYD_TMP"' EXIT
DEPLOYD_INSECURE_HTTP=1
DEPLOYD_VERSION=9.8.7
: >"$DEPLOYD_TMP/curl-auth.conf"
verify_package "$2" "$3"
"""


@pytest.fixture(scope="module")
def server() -> Iterator[PackageRegistry]:
    with PackageRegistry() as registry:
        yield registry


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("verify") / NAME
    path.write_bytes(BODY)
    return path


def _verify(
    server: PackageRegistry, package: Path, sums: bytes | None
) -> subprocess.CompletedProcess[str]:
    with server.lock:
        server.files.pop(SUMS_PATH, None)
        if sums is not None:
            server.files[SUMS_PATH] = sums
    return subprocess.run(
        ["bash", "-c", HARNESS, "verify", str(INSTALL_SH), str(package), server.url + SUMS_PATH],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _expected(sums: str) -> bool:
    """The oracle: awk's fields (blanks and tabs), the file's exact name or `*name` in field 2,
    every such line giving the true sum (any case), at least one such line."""
    found = set()
    for line in sums.split("\n"):
        fields = re.split(r"[ \t]+", line.strip(" \t"))
        if len(fields) >= 2 and fields[1] in (NAME, "*" + NAME):
            found.add(fields[0].lower())
    return found == {TRUE_SUM}


HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
SUM = st.one_of(st.just(TRUE_SUM), st.just(TRUE_SUM.upper()), HEX, HEX.map(lambda h: h[:40]))
LINE_NAME = st.sampled_from(
    [NAME, NAME + ".asc", "old-" + NAME, "./" + NAME, NAME[:-4], "install.sh", NAME.upper()]
)
SEP = st.sampled_from(["  ", " *", " ", "\t", "   "])
LINE = st.builds(
    lambda lead, s, sep, n: f"{lead}{s}{sep}{n}", st.sampled_from(["", " "]), SUM, SEP, LINE_NAME
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(LINE, max_size=5))
@example(lines=[f"{TRUE_SUM}  {NAME}"])
@example(lines=[f"{TRUE_SUM.upper()} *{NAME}", f"{TRUE_SUM}  {NAME}", f"{'0' * 64}  x.deb"])
@example(lines=[f"{TRUE_SUM}  {NAME}", f"{'0' * 64}  {NAME}"])
@example(lines=[f"{TRUE_SUM}  {NAME}.asc"])
def test_accepts_exactly_the_sums_files_that_give_the_files_sum(
    server: PackageRegistry, package: Path, lines: list[str]
) -> None:
    sums = "".join(line + "\n" for line in lines)
    proc = _verify(server, package, sums.encode())
    if _expected(sums):
        assert proc.returncode == 0, (sums, proc.stderr)
        assert f"{NAME} matches the release's SHA256SUMS (sha256 {TRUE_SUM})" in proc.stdout
    else:
        assert proc.returncode == 4, (sums, proc.stdout, proc.stderr)
        (refusal,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("install.sh: REFUSED")]
        assert refusal.endswith("; nothing was installed")
        assert any(
            words in refusal
            for words in (
                "has no entry for " + NAME,
                "no single well-formed sha256",
                "does not match",
            )
        ), refusal


def test_a_missing_sums_file_is_named_and_refused(server: PackageRegistry, package: Path) -> None:
    proc = _verify(server, package, None)
    assert proc.returncode == 4, proc.stderr
    assert "publishes no SHA256SUMS, so " + NAME + " cannot be verified" in proc.stderr


def test_the_sums_ci_writes_are_accepted(server: PackageRegistry, package: Path) -> None:
    """`sha256sum` output over the file and another (what the release jobs publish)."""
    other = package.parent / "install.sh"
    other.write_text("#!/bin/sh\n")
    written = subprocess.run(
        ["sha256sum", "--", NAME, "install.sh"], cwd=package.parent, capture_output=True, check=True
    ).stdout
    assert _verify(server, package, written).returncode == 0
