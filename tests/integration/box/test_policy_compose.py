"""The local policy on compose's own reading: generated compose files, one property per policy
field in the syntaxes a bundle may use (short and long volume syntax, sysctls as a map or a list,
``:`` or ``=`` in security_opt, capabilities with or without ``CAP_``, interpolation from the
rendered .env, ``extends`` in the same file), run through the real ``docker compose config
--format json`` (``adapters.box.docker.composeconfig``, memory files, no engine needed) and judged
by ``core.admission.policy``: what compose resolves is what is refused, each by the line that allows
it. A few examples per field (each is a compose process); tests/unit/core/admission/test_policy.py
runs the pure judge over many more."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters.box.docker import composeconfig
from monky_deployd.config import DockerCfg
from monky_deployd.core.admission import policy, rules
from monky_deployd.core.admission import rules as terms
from monky_deployd.core.admission.rules import Allow, Rules
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render.mask import Masker

pytestmark = pytest.mark.docker

FEW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROJECT_DIR = Path("/var/lib/monky-deployd/revisions/r1")
PROTECTED = ("/", "/etc", "/proc", "/sys", "/dev", "/run/docker.sock", "/var/lib/monky-deployd")


def effective(web: dict[str, Any], env: str = "", **top: Any) -> dict[str, object]:
    doc = {"services": {"web": {"image": "busybox", **web}}, **top}
    return composeconfig.effective(
        DockerCfg(), Path("/nonexistent-docker-dir"), "p", PROJECT_DIR, (yaml.safe_dump(doc), env)
    )[0]


def keys(found: list[rules.Violation]) -> set[tuple[str, str]]:
    return {(v.key, v.asks) for v in found}


@FEW
@given(st.sampled_from(sorted(terms.HOST_NAMESPACE_KEYS)), st.booleans())
def test_host_namespaces_and_privileged_as_compose_resolves_them(key: str, via_env: bool) -> None:
    """``pid: ${MODE}`` with MODE=host in the .env is refused like ``pid: host``."""
    web = {key: "${MODE}" if via_env else "host", "privileged": True}
    config = effective(web, "MODE=host\n")
    found = policy.judge(config, Rules())
    ns = terms.HOST_NAMESPACE_KEYS[key]
    assert keys(found) == {(key, "host"), ("privileged", "true")}
    allowed = Rules(services={"web": Allow(privileged=True, host_namespaces=frozenset({ns}))})
    assert policy.judge(config, allowed) == []


CAPS = st.sampled_from(["NET_ADMIN", "SYS_ADMIN", "CHOWN", "NET_BIND_SERVICE", "SYS_PTRACE"])


@FEW
@given(st.lists(st.tuples(CAPS, st.sampled_from(["", "CAP_", "cap_"])), min_size=1, max_size=3))
def test_cap_add_as_compose_resolves_it(caps: list[tuple[str, str]]) -> None:
    config = effective({"cap_add": [p + c for c, p in caps]})
    found = policy.judge(config, Rules())
    assert {v.asks for v in found} == {c for c, _ in caps} - terms.BASELINE_CAPS
    allowed = Rules(allow=Allow(cap_add=frozenset(c for c, _ in caps)))
    assert policy.judge(config, allowed) == []


@FEW
@given(st.sampled_from(["/dev/fuse", "/dev/net/tun", "/dev/kvm"]), st.booleans())
def test_devices_as_compose_resolves_them(device: str, short: bool) -> None:
    entry: Any = f"{device}:{device}" if short else {"source": device, "target": "/dev/x"}
    config = effective({"devices": [entry]})
    found = policy.judge(config, Rules())
    assert keys(found) == {("devices", device)}
    assert found[0].allow_with == f"policy.services.web.devices: [{device}]"
    assert policy.judge(config, Rules(allow=Allow(devices=frozenset({device})))) == []


@FEW
@given(
    st.sampled_from(["apparmor", "seccomp"]),
    st.sampled_from([":", "="]),
    st.sampled_from(["no-new-privileges:true", "no-new-privileges"]),
)
def test_security_opt_as_compose_resolves_it(kind: str, sep: str, safe: str) -> None:
    config = effective({"security_opt": [f"{kind}{sep}unconfined", safe]})
    found = policy.judge(config, Rules())
    assert [v.allow_with for v in found] == [
        f"policy.services.web.security_opt: [{kind}=unconfined]"
    ]


@FEW
@given(
    st.dictionaries(
        st.sampled_from(["net.core.somaxconn", "net.ipv4.tcp_syncookies", "kernel.msgmax"]),
        st.integers(0, 9).map(str),
        min_size=1,
    ),
    st.booleans(),
)
def test_sysctls_as_a_map_or_a_list_as_compose_resolves_them(
    values: dict[str, str], as_list: bool
) -> None:
    written: Any = [f"{k}={v}" for k, v in values.items()] if as_list else values
    config = effective({"sysctls": written})
    found = policy.judge(config, Rules())
    assert {v.asks for v in found} == set(values) - terms.SAFE_SYSCTLS


@FEW
@given(st.sampled_from(["custom", "system.slice"]))
def test_cgroup_parent_as_compose_resolves_it(parent: str) -> None:
    config = effective({"cgroup_parent": parent})
    assert keys(policy.judge(config, Rules())) == {("cgroup_parent", parent)}


SOURCES = st.sampled_from(
    ["/srv/app/data", "/srv/app/data/", "/srv/app/./data", "/srv/x/../app/data", "/srv//app/d",
     "/etc", "/etc/../etc/", "/var/lib", "/var/run/docker.sock", "/srv/app/../../etc/ssl"]
)  # fmt: skip


@FEW
@given(SOURCES, st.sampled_from(["short", "long", "env", "secret", "volume"]))
def test_bind_mounts_as_compose_resolves_them(source: str, syntax: str) -> None:
    """The same host path in every syntax a bundle may write it: compose's resolved path is
    judged (``..`` and slashes normalized), refused outside ``/srv/app``, and a protected
    path (or its parent) refused whatever the roots."""
    top: dict[str, Any] = {}
    env = ""
    if syntax == "short":
        web: dict[str, Any] = {"volumes": [f"{source}:/m"]}
    elif syntax == "long":
        web = {"volumes": [{"type": "bind", "source": source, "target": "/m"}]}
    elif syntax == "env":
        web, env = {"volumes": ["${DATA}:/m:ro"]}, f"DATA={source}\n"
    elif syntax == "secret":
        web, top = {"secrets": ["s"]}, {"secrets": {"s": {"file": source}}}
    else:
        web = {"volumes": ["vol:/m"]}  # (compose reads "v:/m" as a Windows drive)
        top = {"volumes": {"vol": {"driver_opts": {"type": "none", "o": "bind", "device": source}}}}
    config = effective(web, env, **top)
    rules = Rules(allow=Allow(bind_roots=("/srv/app",)), protected=PROTECTED)
    found = policy.judge(config, rules)
    norm = terms.normpath(source)
    if terms.inside(norm, "/srv/app"):
        assert found == []
    elif any(terms.inside(norm, p) and p != "/" for p in PROTECTED) or terms.inside(
        "/var/lib/monky-deployd", norm
    ):
        assert [v.code for v in found] == [Code.POLICY_PROTECTED_PATH]
    else:
        assert [v.code for v in found] == [Code.POLICY_REFUSED]


def test_an_extends_in_the_same_file_is_judged_on_what_it_resolves_to() -> None:
    doc = {
        "services": {
            "base": {"image": "busybox", "cap_add": ["SYS_ADMIN"], "profiles": ["never"]},
            "web": {"extends": {"service": "base"}},
        }
    }
    config, _ = composeconfig.effective(
        DockerCfg(), Path("/nonexistent"), "p", PROJECT_DIR, (yaml.safe_dump(doc), "")
    )
    found = policy.judge(config, Rules())
    assert {(v.service, v.asks) for v in found} == {("base", "SYS_ADMIN"), ("web", "SYS_ADMIN")}


def test_a_file_compose_cannot_read_is_unjudged() -> None:
    with pytest.raises(DeployError) as caught:
        composeconfig.effective(
            DockerCfg(), Path("/nonexistent"), "p", PROJECT_DIR, ("services: [1, 2]\n", "")
        )
    assert caught.value.code is Code.POLICY_UNJUDGED


def test_compose_s_warnings_come_back_named_masked_and_only_warnings() -> None:
    """An unset variable compose reads as blank and an obsolete key refuse nothing; they come
    back as compose's messages alone (no `time=`/`level=`), the memory file named as what it
    holds; a release compose reads without a word gives none."""
    doc = {"version": "3", "services": {"web": {"image": "busybox", "command": "echo $uri $pw"}}}
    release = (yaml.safe_dump(doc), "pw=hunter2-value\n")
    args = (DockerCfg(), Path("/nonexistent"), "p", PROJECT_DIR, release)
    config, warned = composeconfig.effective(*args, Masker(["hunter2-value"]))
    assert config["services"]["web"]["command"] == ["echo", "hunter2-value"]  # type: ignore[index]
    assert warned == (
        'The "uri" variable is not set. Defaulting to a blank string.',
        "the bundle's compose file: the attribute `version` is obsolete, it will be ignored, "
        "please remove it to avoid potential confusion",
    ), warned
    many = " ".join(f"$v{i}" for i in range(composeconfig.WARNINGS_SHOWN + 5))
    flood = {"services": {"web": {"image": "busybox", "command": f"echo {many}"}}}
    args = (DockerCfg(), Path("/nonexistent"), "p", PROJECT_DIR, (yaml.safe_dump(flood), ""))
    warned = composeconfig.effective(*args)[1]
    assert len(warned) == composeconfig.WARNINGS_SHOWN + 1 and warned[-1] == "and 5 more warnings"
    clean = {"services": {"web": {"image": "busybox", "command": "echo $$uri"}}}
    args = (DockerCfg(), Path("/nonexistent"), "p", PROJECT_DIR, (yaml.safe_dump(clean), ""))
    assert composeconfig.effective(*args)[1] == ()


def _go_quoted(text: str) -> str:
    """``text`` as Go's ``%q`` writes it (logrus quotes a message so), for printable ASCII,
    tabs and line breaks."""
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return '"' + "".join(escapes.get(c, c) for c in text) + '"'


@given(st.text(st.sampled_from('ab"\\ \n\t\r=$x'), min_size=8, max_size=30))
def test_a_secret_in_a_compose_warning_is_masked_in_every_quoting(secret: str) -> None:
    """A warning quoting a value (compose's logrus lines: ``msg=`` in Go's quoting) says no
    secret, quoted or unquoted."""
    stderr = (
        f'time="2026-12-07T19:49:19Z" level=warning msg={_go_quoted(f"odd value {secret} x")}\n'
        f"WARN[0000] odd value {secret} y\n"
    )
    masker = Masker([secret])
    warned = composeconfig._warnings(stderr, {}, masker)
    assert len(warned) == 2, warned
    for said in warned:
        assert secret not in said and _go_quoted(secret)[1:-1] not in said, said
        assert said.startswith("odd value") and masker(said) == said


@pytest.mark.parametrize("secret", ["0004711", "+0004711", "000000004711"])
def test_a_number_compose_reads_out_of_a_secret_is_masked_in_its_warning(secret: str) -> None:
    """A port's target is read as a number: a secret with leading zeros (a PIN) comes back in
    compose's warning on ``mode: host`` as that number, no longer the secret's text."""
    web = {"image": "busybox", "ports": [{"target": "${PIN}", "published": "8080", "mode": "host"}]}
    release = (yaml.safe_dump({"services": {"web": web}}), f"PIN={secret}\n")
    args = (DockerCfg(), Path("/nonexistent"), "p", PROJECT_DIR, release)
    _, warned = composeconfig.effective(*args, Masker([secret]))
    assert warned == (
        'service "web": ports[***/tcp].mode: ports[].mode: host is only honored by the Swarm '
        "routing mesh",
    ), warned


class _Counting(Masker):
    """A masker that counts the texts it was asked to mask."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__(secrets)
        self.calls = 0

    def __call__(self, text: str) -> str:
        self.calls += 1
        return super().__call__(text)


def test_a_flood_of_compose_warnings_costs_only_the_warnings_said() -> None:
    """A bundle of a few KiB makes compose print millions of warnings (a YAML alias of a string
    of `$x` repeated: 31 KiB gave 2,010,000 lines, 219 MB); only the ``WARNINGS_SHOWN`` said are
    masked and kept, the rest only counted: the agent neither masks nor holds a copy of each."""
    line = 'time="2026-12-07T19:49:19Z" level=warning msg="The \\"x\\" variable is not set."\n'
    n = 20_000
    output = line * n
    masker = _Counting(["hunter2-value"])
    tracemalloc.start()
    try:
        warned = composeconfig._warnings(output, {}, masker)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    shown = composeconfig.WARNINGS_SHOWN
    assert warned[:-1] == ('The "x" variable is not set.',) * shown
    assert warned[-1] == f"and {n - shown} more warnings"
    assert masker.calls <= 2 * shown, masker.calls
    assert peak < len(output) // 10, (peak, len(output))
    # a warning is one line: a `time="` left open does not reach into the lines after it
    split = 'time="x\nan error line" level=warning msg="not one"\n' + line
    assert composeconfig._warnings(split, {}, masker) == ('The "x" variable is not set.',)


@FEW
@given(st.sampled_from(["network_mode", "pid", "ipc"]), st.booleans())
def test_another_containers_namespace_and_a_build_reaching_the_host_as_compose_reads_them(
    key: str, via_env: bool
) -> None:
    """``container:<x>`` (also from the .env) and a build's privileged container, host network,
    entitlement and forwarded SSH agent, as compose resolves them."""
    build = {"context": ".", "privileged": True, "network": "host", "ssh": ["default"]}
    build["entitlements"] = ["security.insecure"]
    web = {key: "${MODE}" if via_env else "container:other", "build": build}
    found = policy.judge(effective(web, "MODE=container:other\n"), Rules(allow=Allow(build=True)))
    assert keys(found) == {
        (key, "container:other (another container's namespace)"),
        ("build.privileged", "true"),
        ("build.network", "host"),
        ("build.ssh", "default"),
        ("build.entitlements", "security.insecure"),
    }


def test_device_requests_as_compose_reads_them() -> None:
    """``gpus: all`` (compose: count -1) and a reserved device, refused; allowed by gpu."""
    reserved = [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    web = {"gpus": "all", "deploy": {"resources": {"reservations": {"devices": reserved}}}}
    config = effective(web)
    assert keys(policy.judge(config, Rules())) == {
        ("gpus", "count=-1"),
        ("deploy.resources.reservations.devices", "capabilities=gpu count=1 driver=nvidia"),
    }
    assert policy.judge(config, Rules(allow=Allow(devices=frozenset({terms.GPU})))) == []


@FEW
@given(
    st.sampled_from(["weight_device", "device_read_bps", "device_write_iops"]),
    st.sampled_from([100, 1000]),
)
def test_a_block_device_entry_is_judged_as_compose_writes_it(key: str, weight: int) -> None:
    """The attack on issue 45's weights: compose's model writes a blkio device entry as
    ``{"Path": ..., "Weight": ...}`` (``Rate``), not as the bundle's YAML spells it; a judge
    reading ``path`` and ``weight`` read none (each entry "a relative path", whatever the
    allowance, and a weight never judged). Read as compose writes it: the device needs
    ``devices``, a weight above the engine's default needs ``blkio_weight``."""
    entry = {"path": "/dev/sda", "weight": weight} if key == "weight_device" else {
        "path": "/dev/sda", "rate": "1mb"}  # fmt: skip
    config = effective({"blkio_config": {key: [entry]}})
    heavy = (
        [("blkio_config.weight_device", "1000")] if key == "weight_device" and weight > 500 else []
    )
    found = policy.judge(config, Rules(blkio_default=500))
    assert sorted((v.key, v.asks.split(" (")[0]) for v in found) == sorted(
        [(f"blkio_config.{key}", "/dev/sda"), *heavy]
    )
    allowed = Rules(blkio_default=500, services={"web": Allow(devices=frozenset({"/dev/sda"}))})
    assert [(v.key, v.asks.split(" (")[0]) for v in policy.judge(config, allowed)] == heavy
