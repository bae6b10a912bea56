"""Signed bundles (contract v1.3) end to end: the real CLI's tick, the loopback tenancy, the
session's real OpenBao (its audit log counts the secret reads), a real registry and the real
Docker engine. A box with a release key applies what that key signed, and refuses a bundle
signed by another key, an older release and an expired one before any secret is read: the
running revision keeps running, nothing is pulled, tenancy gets a ``refused`` report and
``status`` says why."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from monky_deployd.core.records.tickrecord import rfc3339
from monky_deployd.core.signing import trust
from monky_deployd.core.signing.trustcfg import keyid
from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, Run
from monky_deployd_testkit.realbao import RealBao

pytestmark = pytest.mark.docker

ENV = "env-e2e-01"
RELEASE_KEY, OTHER_KEY = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
LATER = rfc3339(4_000_000_000, "seconds")  # 2096
EARLIER = "2020-01-01T00:00:00Z"


def public_b64(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def signed(
    raw: dict[str, Any], rev: str, version: int, key: Ed25519PrivateKey, expires: str = LATER
) -> dict[str, Any]:
    body = {**raw, "release": {"version": version, "expires": expires}}
    sig = key.sign(rfc8785.dumps(trust.payload(ENV, rev, body)))
    kid = keyid(base64.b64decode(public_b64(key)))
    return {**body, "signatures": [{"keyid": kid, "sig": base64.b64encode(sig).decode()}]}


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str, real_bao: RealBao) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, real=real_bao, db_password="signed-pw") as lab:
        lab.write_config(trust={"keys": [public_b64(RELEASE_KEY)], "threshold": 1})
        yield lab


def refused(lab: Lab, real_bao: RealBao, rev: str, bundle: dict[str, Any], code: str) -> Run:
    """Publish ``rev``; the tick refuses it with ``code`` and changes nothing."""
    before, pulls = lab.labelled("r1"), lab.pulls()
    reports = len(lab.estate.tenancy.reports)
    lab.estate.tenancy.set_desired(rev, bundle)
    real_bao.mark()
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert (run.summary["outcome"], run.summary["code"]) == ("refused", code), run.stdout
    assert run.errors[0]["code"] == code  # the first error line names the fault
    assert real_bao.kv_reads == 0, real_bao.requests  # refused before any secret was read
    assert lab.labelled("r1") == before and lab.pulls() == pulls  # r1 runs, nothing pulled
    assert len(lab.estate.tenancy.reports) == reports + 1
    rep = lab.estate.tenancy.reports[-1]
    assert (rep["revision"], rep["outcome"], rep["code"]) == (rev, "refused", code)
    assert not (lab.state_dir / "revisions" / rev).exists()  # nothing staged
    proc = lab.cli("status", "--json")
    shown = json.loads(proc.stdout)
    assert shown["revisions"]["applied"] == "r1"
    assert (shown["held"]["revision"], shown["held"]["code"]) == (rev, code)
    assert shown["trust"]["running_version"] == 2 and not shown["trust"]["running_expired"]
    assert code in lab.cli("status").stdout
    return run


def test_a_signed_bundle_applies_and_untrusted_old_or_expired_ones_change_nothing(
    lab: Lab, real_bao: RealBao
) -> None:
    tenancy = lab.estate.tenancy
    tenancy.set_desired("r1", signed(lab.bundle(), "r1", 2, RELEASE_KEY))
    real_bao.mark()
    first = lab.tick()
    assert first.rc == 0 and first.summary["outcome"] == "applied", first.stdout + first.stderr
    assert real_bao.kv_reads > 0 and set(lab.labelled("r1")) == {"web"}
    [verified] = first.events("trust.verified")
    assert verified["release"] == 2
    floor = json.loads((lab.state_dir / "trust.json").read_text())
    assert floor["highest"] == {"version": 2, "revision": "r1"}
    assert (lab.state_dir / "trust.json").stat().st_mode & 0o777 == 0o600

    two = lab.bundle(env_template="DB_PASSWORD=${DB_PASSWORD}\nX=2\n")
    run = refused(lab, real_bao, "r2", signed(two, "r2", 3, OTHER_KEY), "BUNDLE_UNTRUSTED")
    assert "not a key in trust.keys" in run.errors[0]["detail"]
    good = signed(two, "r3", 3, RELEASE_KEY)
    changed = {**good, "compose": good["compose"].replace("3600", "3601")}  # one byte
    refused(lab, real_bao, "r3", changed, "BUNDLE_UNTRUSTED")
    refused(lab, real_bao, "r4", lab.bundle(), "BUNDLE_UNTRUSTED")  # unsigned
    refused(lab, real_bao, "r5", signed(two, "r5", 1, RELEASE_KEY), "BUNDLE_REPLAYED")
    refused(lab, real_bao, "r6", signed(two, "r6", 4, RELEASE_KEY, EARLIER), "BUNDLE_EXPIRED")

    # signed by the release key, a newer release: applied, the floor rises
    tenancy.set_desired("r7", signed(two, "r7", 4, RELEASE_KEY))
    last = lab.tick()
    assert last.rc == 0 and last.summary["outcome"] == "applied", last.stdout + last.stderr
    assert set(lab.labelled("r7")) == {"web"} and lab.container_env()["X"] == "2"
    floor = json.loads((lab.state_dir / "trust.json").read_text())
    assert floor["highest"] == {"version": 4, "revision": "r7"}
    shown = json.loads(lab.cli("status", "--json").stdout)
    assert shown["trust"]["running_version"] == 4 and shown["held"] is None
