"""doctor's pure parts: one line per check, the exit status, and the decisions without I/O."""

from __future__ import annotations

import base64
import json

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.commands import checks
from monky_deployd.core.commands.checks import Check
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

NOW = 1_800_000_000.0
IN_POD = 8000 + 81  # the tenancy pod's in-pod listener: never the intercept
# lines of any text but line breaks (control characters, line and paragraph separators)
line_text = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=30)
text_lines = st.lists(line_text.filter(lambda t: "\x85" not in t), max_size=6)


@given(text_lines)
def test_one_line_has_no_newline_and_no_dangling_colon(lines: list[str]) -> None:
    out = checks.one_line("\n".join(lines))
    assert "\n" not in out and "\r" not in out
    assert not out.endswith(":")
    for ln in lines:  # every line's words survive, in order
        words = ln.strip().rstrip(":").strip()
        assert words in out


def test_one_line_joins_a_colon_line_with_a_space_and_others_with_semicolons() -> None:
    msg = "/etc/x/config.yaml is invalid:\nat 'a': bad\nat 'b': worse"
    assert checks.one_line(msg) == "/etc/x/config.yaml is invalid: at 'a': bad; at 'b': worse"
    assert checks.one_line("tick refused: x is invalid:") == "tick refused: x is invalid"


@given(
    st.sampled_from(checks.STATUSES),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=40).filter(
        lambda t: any(c.isalnum() for c in t)
    ),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
)
def test_a_line_says_the_hint_once_and_only_for_warn_and_fail(
    status: checks.Status, fact: str, hint: str
) -> None:
    out = checks.line(Check("grant", status, fact, hint))
    assert out.startswith(f"{status} grant: ")
    assert "\n" not in out
    said = checks.one_line(hint)
    if status in ("WARN", "FAIL") and said:
        assert out.endswith(f" Check: {checks.sentence(said)}")
    else:
        assert out == checks.sentence(f"{status} grant: {checks.one_line(fact)}")


@given(st.lists(st.sampled_from(checks.STATUSES), max_size=8))
def test_exit_status(statuses: list[checks.Status]) -> None:
    results = [Check(f"c{i}", s, "f") for i, s in enumerate(statuses)]
    want = 2 if "FAIL" in statuses else 1 if "WARN" in statuses else 0
    assert checks.exit_status(results) == want


def test_an_adapter_error_is_the_fact() -> None:
    err = DeployError(
        "OpenBao at h:1 is sealed (GET /v1/sys/health answered 503)",
        code=Code.OPENBAO_SEALED,
        hint="that OpenBao at h:1 is unsealed (operator action)",
    )
    c = checks.from_error("openbao", err)
    assert (c.status, c.code, c.fact) == ("FAIL", "OPENBAO_SEALED", err.message)
    assert checks.line(c) == (
        "FAIL openbao: OpenBao at h:1 is sealed (GET /v1/sys/health answered 503). "
        "Check: that OpenBao at h:1 is unsealed (operator action)."
    )
    assert checks.skipped("token", "openbao", "FAIL").fact == "needs openbao (FAIL above)"
    assert checks.line(Check("x", "OK", "fine", "ignored")) == "OK x: fine."
    assert checks.line(Check("x", "OK", ":")) == "OK x: no fact."


def jwt(claims: dict[str, object]) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"e30.{body}.sig"


def test_grant_checks() -> None:
    ok = checks.grant_check(
        "grant", "/g", jwt({"jti": "k1", "env": "e", "exp": NOW + 3 * 86400}), "e", NOW
    )
    assert (ok.status, ok.fact) == ("OK", "/g is readable: jti k1, env e, expires in 3 d 0 h")
    soon = checks.grant_check(
        "grant", "/g", jwt({"jti": "k1", "env": "e", "exp": NOW + 3600}), "e", NOW
    )
    assert soon.status == "WARN"
    gone = checks.grant_check(
        "grant", "/g", jwt({"jti": "k1", "env": "e", "exp": NOW - 90}), "e", NOW
    )
    assert (gone.status, gone.code) == (
        "WARN",
        "GRANT_EXPIRED",
    ) and "expired 1 m 30 s ago" in gone.fact
    other = checks.grant_check(
        "grant", "/g", jwt({"jti": "k1", "env": "f", "exp": NOW + 9e9}), "e", NOW
    )
    assert other.status == "FAIL" and "for environment f, not e" in other.fact
    assert checks.grant_check("grant", "/g", "a.!!!.c", "e", NOW).code == "GRANT_UNREADABLE"


@given(st.floats(min_value=-1e6, max_value=1e6))
def test_skew(skew: float) -> None:
    c = checks.skew_check("clock", NOW + skew, NOW, "tenancy")
    want = "OK" if abs(skew) < 30 else "WARN" if abs(skew) < 300 else "FAIL"
    assert c.status == want
    assert checks.skew_check("clock", NOW, None, "tenancy").status == "WARN"


@given(
    st.integers(0, 3), st.sets(st.integers(0, 3), max_size=3), st.integers(0, 3),
    st.integers(0, 3), st.integers(0, 0o777),
)  # fmt: skip
def test_access_via_is_the_kernel_rule(
    uid: int, gids: set[int], st_uid: int, st_gid: int, mode: int
) -> None:
    via = checks.access_via(uid, gids, st_uid, st_gid, mode)
    if uid == 0:
        assert via == "root"
    elif uid == st_uid:  # the owner class decides alone, even when group/other would allow
        assert (via == "owner") == bool(mode & 0o400) and via in ("owner", None)
    elif st_gid in gids:
        assert (via == "group") == bool(mode & 0o040) and via in ("group", None)
    else:
        assert (via == "other") == bool(mode & 0o004) and via in ("other", None)


def test_the_ziti_identity_0640_ziti_group_member_reads_through_the_group() -> None:
    assert checks.access_via(1001, {999}, 998, 999, 0o100640) == "group"
    assert checks.access_via(1001, {1001}, 998, 999, 0o100640) is None  # only an ACL


def test_intercept_port() -> None:
    assert checks.intercept_check("t", "ziti", "tenancy.monky.ziti", 443).status == "OK"
    bad = checks.intercept_check("t", "ziti", "tenancy.monky.ziti", IN_POD)
    assert bad.status == "FAIL" and "intercept is 443" in bad.fact
    assert checks.intercept_check("t", "plain", "tenancy.monky.ziti", IN_POD).status == "FAIL"
    assert checks.intercept_check("t", "plain", "127.0.0.1", 39001).status == "OK"


def test_timer_answers() -> None:
    unit = "monky-deployd.timer"
    assert checks.timer_check("timer", unit, 0, "enabled\n").status == "OK"
    off = checks.timer_check("timer", unit, 1, "disabled\n")
    assert off.status == "FAIL" and "is disabled" in off.fact
    absent = checks.timer_check(
        "timer", unit, 1, f"Failed to get unit file state for {unit}: No such file or directory"
    )
    assert absent.status == "FAIL" and "is not installed" in absent.fact
    nosd = checks.timer_check(
        "timer", unit, 1, "System has not been booted with systemd as init system (PID 1)."
    )
    assert nosd.status == "WARN" and "systemd is not running here" in nosd.fact


def test_durations() -> None:
    assert [checks.duration(s) for s in (5, 65, 3700, 90000, -90)] == [
        "5 s", "1 m 5 s", "1 h 1 m", "1 d 1 h", "1 m 30 s",
    ]  # fmt: skip
