"""``monky-deployd bundle sign | verify | public-key`` as the release pipeline runs them: real
processes, the private key on stdin (never in argv), the signed bundle on stdout; what
``verify`` says is what a box with that key decides (``core.signing.trust``). No Docker, no
server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from monky_deployd_testkit.lab import CLI, cli_env

BUNDLE = {
    "project": "shop",
    "compose": "services:\n  web:\n    image: harbor.example.net/env-dev-08/web:1.4\n",
    "env_template": "LOG_LEVEL=info\n",
    "manifest": [],
}


def bundle_cli(tmp: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        (*CLI, "bundle", *args),
        input=stdin,
        capture_output=True,
        env=cli_env(tmp / "home"),
        timeout=60,
        check=False,
    )


def pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def test_sign_with_the_key_on_stdin_then_verify_round_trip(tmp_path: Path) -> None:
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(BUNDLE))
    out = bundle_cli(tmp_path, "public-key", "--key", "-", stdin=pem(key))
    assert out.returncode == 0, out.stderr
    public, _, kid = out.stdout.decode().split()
    other_public = bundle_cli(tmp_path, "public-key", "--key", "-", stdin=pem(other))
    signed = bundle_cli(
        tmp_path,
        *("sign", "--env", "env-dev-08", "--revision", "r42", "--key", "-"),
        *("--release-version", "7", "--valid-for", "14d", str(path)),
        stdin=pem(key),
    )
    assert signed.returncode == 0, signed.stderr
    assert pem(key) not in signed.stdout + signed.stderr
    body: dict[str, Any] = json.loads(signed.stdout)
    assert body["release"]["version"] == 7 and [s["keyid"] for s in body["signatures"]] == [kid]
    assert {k: v for k, v in body.items() if k not in ("release", "signatures")} == BUNDLE
    (tmp_path / "signed.json").write_bytes(signed.stdout)

    def verify(*args: str, revision: str = "r42") -> subprocess.CompletedProcess[bytes]:
        common = ("verify", "--env", "env-dev-08", "--revision", revision)
        return bundle_cli(tmp_path, *common, *args, str(tmp_path / "signed.json"))

    ok = verify("--public-key", public)
    assert ok.returncode == 0 and b"release 7 is signed by 1 trusted key" in ok.stdout
    assert verify("--public-key", public, revision="r43").returncode == 5  # another revision
    wrong = verify("--public-key", other_public.stdout.decode().split()[0])
    assert wrong.returncode == 5 and b"BUNDLE_UNTRUSTED" in wrong.stdout

    # a second key signs too (key rotation): both signatures, each verifies alone
    again = bundle_cli(
        tmp_path,
        *("sign", "--env", "env-dev-08", "--revision", "r42", "--key", "-"),
        str(tmp_path / "signed.json"),
        stdin=pem(other),
    )
    assert again.returncode == 0, again.stderr
    (tmp_path / "signed.json").write_bytes(again.stdout)
    assert len(json.loads(again.stdout)["signatures"]) == 2
    both = verify("--public-key", public, "--public-key", other_public.stdout.decode().split()[0])
    assert both.returncode == 0
    two = verify(
        *("--public-key", public, "--public-key", other_public.stdout.decode().split()[0]),
        *("--threshold", "2"),
    )
    assert two.returncode == 0 and b"signed by 2 trusted key(s)" in two.stdout

    # the box's own settings: config.yaml's trust (threshold 2 of the two keys)
    cfg = tmp_path / "config.yaml"
    keys = [public, other_public.stdout.decode().split()[0]]
    cfg.write_text(json.dumps({"env": "env-dev-08", "trust": {"keys": keys, "threshold": 2}}))
    boxed = verify("--config", str(cfg))
    assert boxed.returncode == 0 and b"threshold 2" in boxed.stdout, boxed.stdout
    cfg.write_text(json.dumps({"env": "env-dev-08", "trust": {"keys": keys, "treshold": 2}}))
    assert verify("--config", str(cfg)).returncode == 3  # config.yaml invalid


def test_sign_refuses_key_and_bundle_both_on_stdin_and_a_bundle_without_release(
    tmp_path: Path,
) -> None:
    key = Ed25519PrivateKey.generate()
    both = bundle_cli(
        tmp_path, "sign", "--env", "e", "--revision", "r1", "--key", "-", stdin=pem(key)
    )
    assert both.returncode == 2 and b"give the bundle as a file" in both.stderr
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(BUNDLE))
    bare = bundle_cli(
        tmp_path, "sign", "--env", "e", "--revision", "r1", "--key", "-", str(path), stdin=pem(key)
    )
    assert bare.returncode == 2 and b"no release" in bare.stderr
    junk = bundle_cli(
        tmp_path, "sign", "--env", "e", "--revision", "r1", "--key", "-", str(path), stdin=b"x"
    )
    assert junk.returncode == 2 and b"not a PEM Ed25519 private key" in junk.stderr
