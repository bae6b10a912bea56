"""One reading (issue 45) through compose's real reader: generated strings (every ``$`` form,
Unicode line breaks and spaces, quotes, backslashes) put in a bundle's bind source, volume
option, label and environment, read by the real ``docker compose config`` (the judge's reading),
written as the judged model's bytes (``core.admission.artifact.text``) and read back by compose
as ``up`` reads them (``composeconfig.read_back``): each host-side string is refused
(POLICY_HOST_STRING) or the same to the judge and to ``up``, and the model reads back value for
value. The model's old bytes (``ensure_ascii=False``) and a ``$`` a pinned path brings in are
read otherwise, and the comparison names them (POLICY_TWO_READINGS); right before ``up`` the
revision's files are read by the very ``Compose`` that runs it (the model, the agent's labels and
pins overrides), so an override or a model changed on disk is named too. Each example is two
compose processes: a modest count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters.box.docker import composeconfig
from monky_deployd.adapters.box.docker.compose import Compose
from monky_deployd.agent import policy
from monky_deployd.agent import reading as agent_reading
from monky_deployd.config import Config, DockerCfg
from monky_deployd.core.admission import artifact, reading
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render.mask import NO_SECRETS

pytestmark = pytest.mark.docker

SOME = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROJECT_DIR = Path("/var/lib/monky-deployd/revisions/r1")
DOCKER_DIR = Path("/nonexistent-docker-dir")
PIECES = [
    "$",
    "$$",
    "${X}",
    "$X",
    "${X:-d}",
    "{",
    "}",
    "\x85",
    "\u2028",
    "\u2029",
    "\xa0",
    "\u3000",
]
PIECES += ['"', "'", "\\", "\\u0085", " ", "\t", "\n", "é", "\U0001f600", "a", "/", ":", "#", "&"]
TEXT = st.lists(st.sampled_from(PIECES), max_size=5).map("".join)


def judged(piece: str) -> dict[str, object] | None:
    """Compose's reading of a bundle holding ``piece`` everywhere (None: compose refuses it)."""
    web = {
        "image": "busybox",
        "volumes": [
            {"type": "bind", "source": f"/srv/p{piece}/x", "target": "/x"},
            {"type": "volume", "source": "data", "target": "/d"},
        ],
        "environment": {"E": f"v{piece}"},
        "labels": {"l": f"v{piece}"},
    }
    doc: dict[str, Any] = {"services": {"web": web}}
    doc["volumes"] = {"data": {"driver_opts": {"type": "tmpfs", "device": "tmpfs", "o": piece}}}
    try:
        return composeconfig.effective(
            DockerCfg(), DOCKER_DIR, "p", PROJECT_DIR, (yaml.safe_dump(doc), "")
        )[0]
    except DeployError as err:
        assert err.code is Code.POLICY_UNJUDGED  # compose's own refusal: nothing runs
        return None


def read_back(text: str) -> dict[str, object]:
    return composeconfig.read_back(DockerCfg(), DOCKER_DIR, "p", PROJECT_DIR, text, NO_SECRETS)


@SOME
@given(TEXT)
def test_a_string_is_refused_or_read_by_up_as_it_was_judged(piece: str) -> None:
    config = judged(piece)
    if config is None:
        return
    refused = {v.key for v in reading.host_strings(config)}
    read = read_back(artifact.text(config))
    assert reading.differences(config, read) == []  # the bytes written read back as judged
    services: Any = config["services"]
    source = services["web"]["volumes"][0]["source"]
    opts: Any = config["volumes"]
    if "services.web.volumes.source" not in refused:
        # what the judge read is what up mounts: no $ left for up's interpolation, no line
        # break for YAML, and compose's reading of it is the judge's
        assert reading.unsafe(source) is None
        assert read["services"]["web"]["volumes"][0]["source"] == source  # type: ignore[index]
    else:
        assert reading.unsafe(source) is not None
    assert ("volumes.data.driver_opts" in refused) == (
        reading.unsafe(opts["data"]["driver_opts"]["o"]) is not None
    )


def test_the_models_old_bytes_read_a_line_break_as_a_space_and_the_check_names_it() -> None:
    config = judged("\x85")
    assert config is not None
    old = json.dumps(config, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    found = reading.differences(config, read_back(old))
    paths = {d.path for d in found}
    assert {"services.web.environment.E", "services.web.labels.l"} <= paths, paths
    lines = [v.line() for v in reading.two_readings(found)]
    assert any("'v\\x85'" in ln and "'v '" in ln for ln in lines), lines
    assert read_back(artifact.text(config)) == config  # the new bytes: read as judged


def test_a_dollar_a_pinned_path_brings_in_is_read_otherwise_and_named() -> None:
    config = judged("")
    assert config is not None
    services: Any = config["services"]
    services["web"]["volumes"][0]["source"] = "/srv/p${X:-etc}/x"  # a link's target, pinned raw
    services["web"]["environment"]["E"] = "v$X"
    found = reading.differences(config, read_back(artifact.text(config)))
    assert [(d.path, d.read) for d in found] == [
        ("services.web.environment.E", "v"),
        ("services.web.volumes[0].source", "/srv/petc/x"),
    ]
    assert {v.key for v in reading.host_strings(config)} == {"services.web.volumes.source"}


def test_compose_that_cannot_read_the_model_back_is_two_readings() -> None:
    config = judged("")
    assert config is not None
    bad = artifact.text(config).replace('"busybox"', '"\\ud800"')  # a lone surrogate escape
    with pytest.raises(DeployError) as caught:
        read_back(bad)
    assert caught.value.code is Code.POLICY_TWO_READINGS


def staged(tmp: Path, labels: str, pins: str = "") -> Path:
    """A revision directory as the agent stages it: the judged model's bytes, the labels
    override, and (verified) the pins override."""
    config = judged("")
    assert config is not None
    where = tmp / "revisions" / "r1"
    where.mkdir(parents=True)
    (where / "compose.judged.json").write_text(artifact.text(config))
    (where / "compose.labels.yaml").write_text(labels)
    if pins:
        (where / "compose.pinned.yaml").write_text(pins)
    return where


def agent_config(tmp: Path) -> Config:
    return Config.model_validate({"env": "env-test", "state_dir": str(tmp / "state")})


LABELS = 'services:\n  "web":\n    labels:\n      "monky-deployd.revision": "r1"\n'


@pytest.mark.parametrize("pinned", [False, True])
def test_before_up_reads_the_files_as_up_does_and_refuses_what_reads_otherwise(
    tmp_path: Path, pinned: bool
) -> None:
    pins = 'services:\n  "web":\n    image: "sha256:' + "ab" * 32 + '"\n' if pinned else ""
    where = staged(tmp_path, LABELS, pins)
    cfg = agent_config(tmp_path)
    compose = Compose(DockerCfg(), DOCKER_DIR, "p", where, pinned=pinned)
    model = policy.read_model(cfg, where)
    agent_reading.before_up(cfg, compose, "r1", model, NO_SECRETS)  # as judged: no refusal
    # the agent's own override read otherwise by compose (interpolated): named by key path
    (where / "compose.labels.yaml").write_text(LABELS.replace('"r1"', '"r1${X:-x}"'))
    with pytest.raises(DeployError) as caught:
        agent_reading.before_up(cfg, compose, "r1", model, NO_SECRETS)
    assert caught.value.code is Code.POLICY_TWO_READINGS
    assert caught.value.detail.splitlines() == [
        "services.web.labels.monky-deployd.revision was judged as 'r1${X:-x}' but compose "
        "reads 'r1x' from the file it runs (no allowance permits it)"
    ]
    # the model on disk changed after the judge: what compose reads is not what was judged
    (where / "compose.labels.yaml").write_text(LABELS)
    text = (where / "compose.judged.json").read_text()
    (where / "compose.judged.json").write_text(text.replace('"v"', '"w"'))
    with pytest.raises(DeployError) as caught:
        agent_reading.before_up(cfg, compose, "r1", model, NO_SECRETS)
    assert caught.value.code is Code.POLICY_TWO_READINGS
    assert "services.web.environment.E was judged as 'v' but compose reads 'w'" in (
        caught.value.detail
    )
