"""The secret-canary sweep: seeded random secrets against real compose and engine errors.

Every path that runs a child or reads a service's error is driven into an error that echoes a
secret (compose's config parser, the registry, the engine, tenancy and OpenBao error bodies), with
the real CLI, the real engine and a real registry. Then every journal line (stdout and stderr of
the CLI, ``--debug``), every report body tenancy received, and the argv and environment of every
docker child (recorded by a wrapper the config names as ``docker.binary``) are searched for any
run of 8 characters of any secret (and any whole occurrence of a short one). The canaries differ
per seed (``MONKY_CANARY_SEED``); the shapes stay: a multi-line PEM-like key, quotes,
backslashes, ``$``, non-ASCII text, a short secret.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import string
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, Run

pytestmark = pytest.mark.docker

SEED = int(os.environ.get("MONKY_CANARY_SEED", "20261203"))
ENV = "env-e2e-01"
APP = f"envs/{ENV}/app"
RUN = 8


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def canaries(seed: int) -> dict[str, str]:
    """Secret values of several shapes; none of them is a valid size, port or user."""
    rng = random.Random(seed)
    b64 = string.ascii_letters + string.digits + "+/"
    body = "\n".join(_pick(rng, b64, 64) for _ in range(4))
    nasty = string.ascii_letters + string.digits + "\"'\\$ {}#=é€ßЖ✓"
    return {
        "pem": f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----",
        "nasty": "Zq" + _pick(rng, nasty, 30) + '"\\$x',
        "lines": _pick(rng, string.ascii_letters, 12) + "\n" + _pick(rng, nasty, 14) + "\\n$$",
        "unicode": "ü" + _pick(rng, "äöüßéèñøåЖЯ漢字✓" + string.ascii_letters, 20),
        "tag": "t" + _pick(rng, string.ascii_lowercase + string.digits, 23),
        "short": "k" + _pick(rng, string.ascii_letters, 5),
    }


# -- what the agent let out ------------------------------------------------------------------


def leaked(secret: str, haystack: str) -> int:
    """UTF-8 bytes of ``secret`` that ``haystack`` shows: characters covered by a run of 8 or
    more (a secret shorter than 8: its whole occurrences)."""
    if len(secret) < RUN:
        return len(secret.encode()) if secret in haystack else 0
    shown = [False] * len(secret)
    for i in range(len(secret) - RUN + 1):
        if secret[i : i + RUN] in haystack:
            shown[i : i + RUN] = [True] * RUN
    return sum(len(c.encode()) for c, s in zip(secret, shown, strict=True) if s)


def strings_of(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings_of(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings_of(v)]
    return []


@dataclass
class Sweep:
    lab: Lab
    records: Path
    secrets: dict[str, str] = field(default_factory=dict)
    haystacks: dict[str, list[str]] = field(default_factory=dict)

    def tick(self, scenario: str, *, echoes: bool = True) -> Run:
        """One tick; with ``echoes``, its first error must show a mask (so the scenario really
        made a tool echo a secret: a compose that stopped echoing would make the sweep vacuous)."""
        run = self.lab.tick("--debug")
        if run.errors:
            print(f"{scenario}: {run.errors[0]['message']} | {run.errors[0].get('detail')!r}")
        if echoes:
            assert run.errors and "***" in json.dumps(run.errors[0]), (scenario, run.stdout)
        hay = self.haystacks.setdefault(scenario, [])
        hay += [run.stdout, run.stderr]
        for line in run.stdout.splitlines():
            with contextlib.suppress(ValueError):
                hay += strings_of(json.loads(line))
        return run

    def learn_tokens(self) -> None:
        for rec in self.lab.estate.bao.tokens.records():
            self.secrets[f"token-{rec.accessor}"] = rec.token
        self.secrets["grant"] = self.lab.estate.grant
        self.secrets["registry"] = self.lab.registry.password

    def report(self) -> dict[str, int]:
        """bytes leaked per haystack: the journal of each scenario, the reports, the children."""
        self.learn_tokens()
        reports: list[str] = []
        for rep in self.lab.estate.tenancy.reports:
            reports += [json.dumps(rep), json.dumps(rep, ensure_ascii=False), *strings_of(rep)]
        self.haystacks["reports"] = reports
        self.haystacks["children-argv-env"] = [
            part.decode("utf-8", "replace")
            for rec in sorted(self.records.iterdir())
            for part in rec.read_bytes().split(b"\0")
        ]
        return {
            name: sum(leaked(s, h) for s in self.secrets.values() for h in hay)
            for name, hay in self.haystacks.items()
        }


WRAPPER = """#!/bin/sh
# records the argv and environment of every docker child of the agent, then runs docker
n="{records}/$(date +%s%N)-$$"
printf '%s\\0' "$@" > "$n.argv"
env -0 > "$n.env"
exec docker "$@"
"""


@pytest.fixture
def sweep(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Sweep]:
    with Lab(tmp_path, registry, web_image) as lab:
        records = tmp_path / "children"
        records.mkdir()
        wrapper = tmp_path / "docker-recording"
        wrapper.write_text(WRAPPER.format(records=records))
        wrapper.chmod(0o755)
        lab.write_config(docker={"binary": str(wrapper)})
        sw = Sweep(lab, records, secrets=canaries(SEED))
        lab.estate.bao.set_secret(APP, dict(sw.secrets))
        yield sw


def _bundle(lab: Lab, service: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """``lab.bundle`` with extra keys on the service and every canary as a variable."""
    manifest = [
        {"name": name.upper(), "path": APP, "key": name}
        for name in ("pem", "nasty", "lines", "unicode", "tag", "short", "mem")
    ] + [
        {"name": "registry", "path": f"envs/{ENV}/registry", "key": "robot", "use": "registry-auth"}
    ]
    template = "".join(f"{n['name']}=${{{n['name']}}}\n" for n in manifest[:-1])
    b = lab.bundle(env_template=template, manifest=manifest, **kw)
    compose = yaml.safe_load(b["compose"])
    compose["services"]["web"].update(service)
    b["compose"] = yaml.safe_dump(compose)
    return b


def _break_env_at_rest(lab: Lab, revision: str, value: str) -> None:
    """The applied .env and judged model now hold a MEM compose refuses (as after a compose
    upgrade that reads a value an older one took); written as the agent writes them (the
    model holds the value interpolated, ``$`` doubled as compose writes it)."""
    env = lab.state_dir / "revisions" / revision / ".env"
    escaped = value.replace("$", "$$").replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n")
    lines = [ln for ln in env.read_text().splitlines() if not ln.startswith("MEM=")]
    env.write_text("\n".join([*lines, f'MEM="{escaped}"']) + "\n")
    model_path = lab.state_dir / "revisions" / revision / "compose.judged.json"
    model = json.loads(model_path.read_text())
    model["services"]["web"]["mem_limit"] = value.replace("$", "$$")
    model_path.write_text(json.dumps(model))


def test_no_secret_leaves_through_any_path(sweep: Sweep, registry: Registry) -> None:
    lab, s = sweep.lab, sweep.secrets
    bao = lab.estate.bao
    bao.set_secret(APP, {**s, "mem": "64m"})
    # apply: compose's config parser echoes a value Go-quoted and cut short (pull runs first)
    for i, field_ in enumerate(("pem", "lines", "nasty", "unicode")):
        lab.estate.tenancy.set_desired(
            f"mem{i}", _bundle(lab, {"mem_limit": f"${{{field_.upper()}}}"})
        )
        run = sweep.tick(f"apply:mem_limit={field_}")
        assert run.rc != 0 and run.errors, run.stdout
    # apply: ports echo the raw value
    lab.estate.tenancy.set_desired("ports", _bundle(lab, {"ports": ["${NASTY}"]}))
    assert sweep.tick("apply:ports").rc != 0
    # pull: the registry has no such tag; the reference names it
    ref = f"{registry.host}/{ENV}/web:${{TAG}}"
    lab.estate.tenancy.set_desired("pull", _bundle(lab, {"image": ref}))
    run = sweep.tick("pull:image-tag")
    assert run.errors and run.errors[0]["phase"] == "pull", run.stdout
    # up: the engine cannot find the user, and prints it raw
    for i, field_ in enumerate(("lines", "short")):
        lab.estate.tenancy.set_desired(f"up{i}", _bundle(lab, {"user": f"${{{field_.upper()}}}"}))
        run = sweep.tick(f"up:user={field_}")
        assert run.errors and run.errors[0]["phase"] == "up", run.stdout
    # restore: r1 runs; its container dies; the .env at rest now holds a value compose refuses
    good = _bundle(lab, {"mem_limit": "${MEM}"})
    lab.estate.tenancy.set_desired("r1", good)
    run = sweep.tick("apply:good", echoes=False)
    assert run.rc == 0, run.stdout
    restore_secret = "Rz" + s["nasty"][::-1] + "\n" + s["pem"][-40:]
    sweep.secrets["restore"] = restore_secret
    _break_env_at_rest(lab, "r1", restore_secret)
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), capture_output=True, check=True)
    run = sweep.tick("restore")
    assert run.errors and run.errors[0]["phase"] == "up", run.stdout
    # down: a new revision renames the project; the previous one's down reads the broken .env
    lab.extra_projects = (lab.project + "b",)
    lab.estate.tenancy.set_desired(
        "r2", _bundle(lab, {"mem_limit": "${MEM}"}, project=lab.project + "b")
    )
    run = sweep.tick("down")
    assert run.errors and run.errors[0]["phase"] == "down", run.stdout
    # service error bodies that echo the bearer token and the grant
    sweep.learn_tokens()
    token = json.loads((lab.state_dir / "token.json").read_text())["token"]["token"]
    echo = {"error": {"code": token, "message": f"token {token} is not good here"}}
    lab.estate.tenancy.fail_next(500, json.dumps(echo).encode(), path_contains="checkin")
    assert sweep.tick("tenancy-echo").rc != 0
    errors = {"errors": [f"internal error reading with token {token!r}"]}
    bao.fail_next(500, json.dumps(errors).encode(), path_contains="/data/")
    lab.estate.tenancy.set_desired("r3", good)
    assert sweep.tick("openbao-echo").rc != 0
    (lab.state_dir / "token.json").unlink()
    grant = lab.estate.grant
    bao.fail_next(400, json.dumps({"errors": [f"bad jwt: {grant}"]}).encode(), "login")
    assert sweep.tick("openbao-grant-echo").rc != 0

    leaks = sweep.report()
    print(f"secret sweep (seed {SEED}): bytes leaked per path {leaks}")
    assert not any(leaks.values()), f"secret bytes leaked per path: {leaks}"


def test_a_rollback_masks_the_last_known_good_secrets_too(sweep: Sweep) -> None:
    """r1 (the LKG) writes two of its secrets to a named volume (``$$``: the shell reads them,
    not compose); the secrets are then rotated and r2's healthcheck prints that file and fails:
    the failed verify's health output (the fault's first line, its detail, the rollback's
    lines, the report) shows values of the LKG, not of the revision being applied. Both sets
    are the tick's to mask (before, 570 bytes of them reached the journal)."""
    lab, old = sweep.lab, dict(sweep.secrets)
    bao = lab.estate.bao
    bao.set_secret(APP, {**old, "mem": "64m"})
    volume = {"volumes": ["data:/data"]}
    writes = {
        **volume,
        "command": [
            "sh",
            "-c",
            'printf %s "$$NASTY" > /data/lkg; printf %s "$$PEM" >> /data/lkg; exec sleep 3600',
        ],
    }
    r1 = _bundle(lab, writes)
    with_volume = yaml.safe_load(r1["compose"])
    with_volume["volumes"] = {"data": {}}
    r1["compose"] = yaml.safe_dump(with_volume)
    lab.estate.tenancy.set_desired("r1", r1)
    try:
        assert sweep.tick("lkg:good", echoes=False).rc == 0
        new = canaries(SEED + 1)
        sweep.secrets.update({f"r2-{k}": v for k, v in new.items()})
        bao.set_secret(APP, {**new, "mem": "64m"})
        failing = {
            **volume,
            "healthcheck": {
                "test": ["CMD-SHELL", "cat /data/lkg; exit 1"],
                "interval": "1s",
                "retries": 1,
            },
        }
        r2 = _bundle(lab, failing)
        doc = yaml.safe_load(r2["compose"])
        doc["volumes"] = {"data": {}}
        r2["compose"] = yaml.safe_dump(doc)
        lab.estate.tenancy.set_desired("r2", r2)
        run = sweep.tick("rollback:lkg-value")
        assert run.errors[0]["code"] == "VERIFY_UNHEALTHY", run.stdout
        assert lab.estate.tenancy.reports[-1]["rollback"] == {"to_revision": "r1", "ok": True}
        leaks = sweep.report()
        print(f"rollback sweep (seed {SEED}): bytes leaked per path {leaks}")
        assert not any(leaks.values()), f"secret bytes leaked per path: {leaks}"
    finally:
        lab.cleanup()
        subprocess.run(("docker", "volume", "rm", f"{lab.project}_data"), capture_output=True)
