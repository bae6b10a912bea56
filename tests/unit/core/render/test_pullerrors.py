"""pullerrors.classify on real captured outputs.

The CAPTURED strings are the stderr of ``docker compose pull`` (compose v5.6.1, docker 28.2 CLI,
dockerd 20.10) against the test registry of monky_deployd_testkit.dockerlab, captured on
this machine kind; tests/integration/box/test_registry_real.py re-checks the same
classification on live output.
"""

from __future__ import annotations

import pytest

from monky_deployd.core.errors import Code
from monky_deployd.core.render import pullerrors

REF = "127.0.0.1:44553/team/app:v1"

CAPTURED = {
    "wrong-password": (
        f" Image {REF} Pulling \n Image {REF} Error unauthorized: authentication required\n"
        "Error response from daemon: unauthorized: authentication required\n"
        "Error response from daemon: unauthorized: authentication required\n"
    ),
    "no-credential": (
        f" Image {REF} Pulling \n Image {REF} Error Head "
        '"http://127.0.0.1:44553/v2/team/app/manifests/v1": no basic auth credentials\n'
        'Error response from daemon: Head "http://127.0.0.1:44553/v2/team/app/manifests/v1": '
        "no basic auth credentials\n"
    ),
    "unknown-tag": (
        " Image 127.0.0.1:44553/team/app:nope Pulling \n Image 127.0.0.1:44553/team/app:nope "
        "Error manifest for 127.0.0.1:44553/team/app:nope not found: manifest unknown: "
        "manifest unknown\nError response from daemon: manifest for "
        "127.0.0.1:44553/team/app:nope not found: manifest unknown: manifest unknown\n"
    ),
    "connection-refused": (
        " Image 127.0.0.1:1/team/app:v1 Pulling \n Image 127.0.0.1:1/team/app:v1 Error Get "
        '"http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused\n'
        'Error response from daemon: Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: '
        "connect: connection refused\n"
    ),
    "dns": (
        " Image nosuchhost.invalid:5000/team/app:v1 Pulling \n Image "
        'nosuchhost.invalid:5000/team/app:v1 Error Get "https://nosuchhost.invalid:5000/v2/": '
        "dial tcp: lookup nosuchhost.invalid on 10.255.255.53:53: no such host\n"
        'Error response from daemon: Get "https://nosuchhost.invalid:5000/v2/": dial tcp: '
        "lookup nosuchhost.invalid on 10.255.255.53:53: no such host\n"
    ),
    # A dockerd whose data-root is a 48 MiB tmpfs pulling a 64 MiB image
    # (tests/integration/box/test_preflight.py).
    "disk-full": (
        " Image 127.0.0.1:54093/team/big:v1 Pulling \n 90c057e26f3b Pulling fs layer 0B\n"
        " a67e0084467c Pulling fs layer 0B\n 75eb4baa91aa Pulling fs layer 0B\n"
        " a67e0084467c Downloading 3.393kB\n a67e0084467c Verifying Checksum 0B\n"
        " a67e0084467c Download complete 0B\n 90c057e26f3b Downloading 36.45kB\n"
        " 90c057e26f3b Extracting 32.77kB\n 75eb4baa91aa Downloading 17.8MB\n"
        " 90c057e26f3b Pull complete 0B\n 75eb4baa91aa Downloading 67.13MB\n"
        "write /tmp/dd2/root/tmp/GetImageBlob185943647: no space left on device\n"
        "write /tmp/dd2/root/tmp/GetImageBlob185943647: no space left on device\n"
    ),
}


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("disk-full", "DISK_FULL", "no space left on device"),
        ("wrong-password", "REGISTRY_AUTH", "unauthorized: authentication required"),
        ("no-credential", "REGISTRY_AUTH", "no basic auth credentials"),
        ("unknown-tag", "IMAGE_NOT_FOUND", "manifest unknown"),
        ("connection-refused", "REGISTRY_UNREACHABLE", "connection refused"),
        ("dns", "REGISTRY_UNREACHABLE", "no such host"),
    ],
)
def test_captured_outputs(name: str, code: str, words: str) -> None:
    got_code, line = pullerrors.classify(CAPTURED[name])
    assert got_code == code
    assert words in line
    assert "Pulling" not in line


def test_progress_lines_are_dropped_from_a_real_pull() -> None:
    assert pullerrors.clean_lines(CAPTURED["disk-full"]) == [
        "write /tmp/dd2/root/tmp/GetImageBlob185943647: no space left on device"
    ]


def test_line_is_verbatim_from_the_output() -> None:
    _, line = pullerrors.classify(CAPTURED["no-credential"])
    assert line in CAPTURED["no-credential"]


@pytest.mark.parametrize(
    ("output", "code", "words"),
    [
        # Shapes seen from other daemons/compose versions (Docker Hub, Harbor, containerd store).
        (
            "Error response from daemon: pull access denied for foo/bar, repository does not "
            "exist or may require 'docker login': denied: requested access to the resource is "
            "denied",
            "REGISTRY_AUTH",
            "pull access denied",
        ),
        (
            "web Error unknown: denied: requested access to the resource is denied",
            "REGISTRY_AUTH",
            "denied: requested access",
        ),
        (
            'failed to resolve reference "harbor/x/web:1.4": harbor/x/web:1.4: not found',
            "IMAGE_NOT_FOUND",
            "not found",
        ),
        (
            'Get "https://harbor.example.net/v2/": dial tcp: lookup harbor.example.net: '
            "Temporary failure in name resolution",
            "REGISTRY_UNREACHABLE",
            "Temporary failure in name resolution",
        ),
        (
            'Get "https://10.0.0.9/v2/": dial tcp 10.0.0.9:443: i/o timeout',
            "REGISTRY_UNREACHABLE",
            "i/o timeout",
        ),
        (
            " 3f4ca61aafcd Downloading [=====>   ]  1.2MB/3.4MB\n"
            "failed to register layer: write /var/lib/docker/overlay2/abc/diff/bin/x: "
            "no space left on device\n",
            "DISK_FULL",
            "no space left on device",
        ),
        (
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
            "Is the docker daemon running?",
            "DOCKER_UNAVAILABLE",
            "Cannot connect to the Docker daemon",
        ),
        ("toomanyrequests: retry later\n\n", "PULL_FAILED", "toomanyrequests: retry later"),
        ("", "PULL_FAILED", "(no output)"),
    ],
)
def test_patterns(output: str, code: str, words: str) -> None:
    got_code, line = pullerrors.classify(output)
    assert (got_code, words in line) == (code, True), line


def test_disk_full_wins_over_an_auth_line_from_another_service() -> None:
    out = CAPTURED["wrong-password"] + "write /var/lib/containerd/x: no space left on device\n"
    assert pullerrors.classify(out)[0] == "DISK_FULL"


def test_progress_noise_and_ansi_are_stripped() -> None:
    out = (
        "\x1b[1A\x1b[2K[+] Pulling 1/2\r\n ✔ db Pulled \n ⠿ web Pulling \n"
        " 3f4ca61aafcd Pull complete \n ✘ web Error manifest unknown\n"
    )
    assert pullerrors.clean_lines(out) == ["web Error manifest unknown"]


def test_pull_error_carries_the_words_first() -> None:
    err = pullerrors.pull_error(CAPTURED["no-credential"], returncode=1, registry_host=REF[:15])
    assert err.code == "REGISTRY_AUTH"
    first_line = str(err).splitlines()[0]
    assert "no basic auth credentials" in first_line
    assert "no basic auth credentials" in err.detail
    assert "Pulling" not in err.detail
    assert "has none" in err.message, "no credential was sent: not 'refused the credential'"
    wrong = pullerrors.pull_error(CAPTURED["wrong-password"])
    assert "refused the agent's credential" in wrong.message


# -- the operator's first line, word for word ---------------------------------------------------


def test_no_credential_sent_names_the_host_and_exit_status() -> None:
    err = pullerrors.pull_error(
        "x: no basic auth credentials\n", returncode=1, registry_host="h:5000"
    )
    assert (err.code, err.outcome) == ("REGISTRY_AUTH", "failed")
    assert err.message == (
        "docker compose pull failed: the registry requires a login and the agent has none for "
        "this registry (h:5000): x: no basic auth credentials [exit status 1]"
    )
    assert err.hint == (
        "that the bundle has a registry-auth manifest entry and that its registry_host is "
        "the registry in the image reference"
    )
    assert err.detail == "x: no basic auth credentials"


def test_a_refused_credential_keeps_the_general_auth_hint() -> None:
    err = pullerrors.pull_error("unauthorized: authentication required\n", registry_host="h")
    assert err.message == (
        "docker compose pull failed: the registry refused the agent's credential (h): "
        "unauthorized: authentication required"
    )
    assert err.hint == pullerrors.MEANING[Code.REGISTRY_AUTH][1]


def test_without_host_or_status_nothing_is_added() -> None:
    err = pullerrors.pull_error("manifest unknown\n")
    assert err.message == (
        "docker compose pull failed: the registry has no such image or tag: manifest unknown"
    )
    assert pullerrors.pull_error("manifest unknown\n", registry_host="").message == err.message


def test_exit_status_zero_is_still_shown() -> None:
    err = pullerrors.pull_error("manifest unknown\n", returncode=0)
    assert err.message.endswith(": manifest unknown [exit status 0]")


def test_a_full_disk_is_not_blamed_on_the_registry_host() -> None:
    err = pullerrors.pull_error(
        "write /x: no space left on device\n", returncode=18, registry_host="h"
    )
    assert err.message == (
        "docker compose pull failed: the pull ran out of disk space: "
        "write /x: no space left on device [exit status 18]"
    )
    assert err.hint == pullerrors.MEANING[Code.DISK_FULL][1]


@pytest.mark.parametrize("host", ["h", None])
def test_no_output_says_so(host: str | None) -> None:
    err = pullerrors.pull_error("", registry_host=host)
    assert err.code == "PULL_FAILED"
    assert err.message.endswith(f"{' (h)' if host else ''}: (no output)")
    assert err.hint == "the line quoted here and the Docker daemon's log"
    assert err.detail == ""
    assert pullerrors.classify("\n \r\n") == ("PULL_FAILED", "(no output)")


def test_detail_is_the_last_20_clean_lines() -> None:
    output = "".join(f"error line {i}\n" for i in range(30))
    err = pullerrors.pull_error(output)
    assert err.detail == "\n".join(f"error line {i}" for i in range(10, 30))
    assert err.code == "PULL_FAILED"
    assert err.message.endswith(": error line 29")


def test_unknown_output_quotes_the_last_line() -> None:
    assert pullerrors.classify("first\nsecond\n") == ("PULL_FAILED", "second")


# -- cleaning ------------------------------------------------------------------------------------


def test_ansi_codes_go_without_a_trace_and_carriage_returns_split_lines() -> None:
    out = "a\rb\r\n\x1b[31mError\x1b[0m: x\x1b]0;title\x07 y\n  ✘ z\n z\n"
    assert pullerrors.clean_lines(out) == ["a", "b", "Error: x y", "z"]


def test_the_first_matching_line_is_quoted_verbatim() -> None:
    out = "web Error manifest unknown\ndb Error manifest unknown: other\n"
    assert pullerrors.classify(out) == ("IMAGE_NOT_FOUND", "web Error manifest unknown")


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("Disk quota exceeded", "DISK_FULL"),
        ("dial unix /var/run/docker.sock: connect: permission denied", "DOCKER_UNAVAILABLE"),
        ("server misbehaving", "REGISTRY_UNREACHABLE"),
        ("no route to host", "REGISTRY_UNREACHABLE"),
        ("network is unreachable", "REGISTRY_UNREACHABLE"),
        ("net/http: TLS handshake timeout", "REGISTRY_UNREACHABLE"),
        ("(Client.Timeout exceeded while awaiting headers)", "REGISTRY_UNREACHABLE"),
        ("name unknown: repository name not known to registry", "IMAGE_NOT_FOUND"),
    ],
)
def test_every_pattern_family(line: str, code: str) -> None:
    assert pullerrors.classify(f" web Pulling \n{line}\n") == (code, line)
