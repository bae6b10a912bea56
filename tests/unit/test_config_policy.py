"""config.yaml's ``policy``: empty by default (Pod Security baseline), each allowance narrow and
checked at load with one line per problem; ``agent.policy.rules`` adds what no config loosens."""

from __future__ import annotations

import os

import pytest

from monky_deployd.agent import policy as agent_policy
from monky_deployd.config import parse
from monky_deployd.core.faults import ConfigError


def test_the_default_policy_allows_nothing_beyond_baseline() -> None:
    cfg = parse({"env": "env-dev-08"}, "config.yaml")
    allow = cfg.policy.allow
    assert not allow.privileged and cfg.policy.services == {}
    assert allow.cap_add == allow.devices == allow.sysctls == [] and allow.bind_roots == []


def test_allowances_load_narrow_and_normalized() -> None:
    cfg = parse(
        {
            "env": "env-dev-08",
            "policy": {
                "allow": {"bind_roots": ["/srv/app/"]},
                "services": {"vpn": {"cap_add": ["cap_net_admin"], "host_namespaces": ["network"]}},
            },
        },
        "config.yaml",
    )
    assert cfg.policy.services["vpn"].cap_add == ["NET_ADMIN"]
    rules = agent_policy.rules(cfg)
    assert rules.allows("vpn").cap_add == frozenset({"NET_ADMIN"})
    assert rules.allows("web").cap_add == frozenset()
    assert "/srv/app" in rules.allow.bind_roots
    assert os.path.realpath(cfg.locks.dir) in rules.allow.bind_roots  # always a root
    for path in ("/", "/etc", "/var/run/docker.sock", "/run/docker.sock", "/var/lib/monky-deployd"):
        assert path in rules.protected
    assert "/etc/monky-deployd/grant.jwt" in rules.protected


def test_each_bad_allowance_is_its_own_line() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(
            {
                "env": "env-dev-08",
                "policy": {
                    "allow": {"bind_roots": ["srv/app", "/"], "host_namespaces": ["mount"]},
                    "services": {"web": {"cap_add": ["NET ADMIN"], "privileged": "maybe"}},
                    "deny": {},
                },
            },
            "config.yaml",
        )
    lines = caught.value.message.splitlines()[1:]
    assert [ln.split("'")[1] for ln in lines] == [
        "policy.allow.host_namespaces.0",
        "policy.allow.bind_roots.0",
        "policy.allow.bind_roots.1",
        "policy.services.web.privileged",
        "policy.services.web.cap_add.0",
        "policy.deny",
    ]


def test_log_drivers_and_the_oom_score_floor_load_and_merge() -> None:
    cfg = parse(
        {
            "env": "env-dev-08",
            "policy": {
                "allow": {"log_drivers": ["syslog"], "oom_score_adj": -100},
                "services": {"db": {"log_drivers": ["gelf"], "oom_score_adj": -900}},
            },
        },
        "config.yaml",
    )
    rules = agent_policy.rules(cfg)
    assert rules.allows("web").log_drivers == frozenset({"syslog"})
    assert rules.allows("db").log_drivers == frozenset({"syslog", "gelf"})
    assert (rules.allows("web").oom_score_adj, rules.allows("db").oom_score_adj) == (-100, -900)
    assert parse({"env": "e"}, "config.yaml").policy.allow.oom_score_adj == 0
    with pytest.raises(ConfigError) as caught:
        parse(
            {
                "env": "e",
                "policy": {
                    "allow": {"oom_score_adj": 1},
                    "services": {"w": {"oom_score_adj": -1001}},
                },
            },
            "config.yaml",
        )
    lines = caught.value.message.splitlines()[1:]
    assert [ln.split("'")[1] for ln in lines] == [
        "policy.allow.oom_score_adj",
        "policy.services.w.oom_score_adj",
    ]


HIDDEN = ["/tmp", "/tmp/app", "/var/tmp/x", "/home/ops/data", "/root", "/run/user/1000", "/home/"]
VISIBLE = ["/srv/app", "/var/lib/app", "/tmpfoo", "/homes/x", "/run/users", "/opt/tmp"]


@pytest.mark.parametrize("scope", ["allow", "services.web"])
def test_a_bind_root_the_unit_hides_from_the_agent_is_refused_at_load(scope: str) -> None:
    allow = {"bind_roots": [*HIDDEN, *VISIBLE]}
    policy_cfg: dict[str, object] = (
        {"allow": allow} if scope == "allow" else {"services": {"web": allow}}
    )
    with pytest.raises(ConfigError) as caught:
        parse({"env": "env-dev-08", "policy": policy_cfg}, "config.yaml")
    lines = caught.value.message.splitlines()[1:]
    assert [ln.split("'")[1] for ln in lines] == [
        f"policy.{scope}.bind_roots.{i}" for i in range(len(HIDDEN))
    ]
    assert "PrivateTmp=yes" in lines[0] and "ProtectHome=yes" in lines[3]
    assert all("cannot judge what the engine would mount" in ln for ln in lines)
    ok = parse({"env": "e", "policy": {"allow": {"bind_roots": VISIBLE}}}, "config.yaml")
    assert len(ok.policy.allow.bind_roots) == len(VISIBLE)
