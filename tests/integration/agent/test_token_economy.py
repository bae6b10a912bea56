"""The lease economy against the loopback fakes and a real OpenBao server: real hvac, the tick's
own code, a clock the tests move.

``Box.tick()`` is one timer start: ``agent.tick.tick.run_tick`` (transport, token phase, check-in
with its one re-acquire on TOKEN_INVALID; no desired state, so the tick ends idle). The long
simulations serve the fakes in-process (``Estate.wire()``, an ``httpx.MockTransport`` in the
agent's own client); a few ticks go over real loopback sockets. Counts come from the fakes.

Tests marked ``@BOTH`` also run against the session's real OpenBao (``RealBao``: tenancy mints
its lease tokens there, counts come from the server's audit log). The server's clock is the real
one, so those tests move only the agent's and tenancy's clock by a tick's 60 s (the server's
TTLs are hours), and a lease near its end is shown to the server as one (``shorten``), not waited
for. The long simulations stay on the fake, whose clock can move days.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from monky_deployd import config
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.net import transport
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.agent.token import HeldToken, TokenKeeper, TokenState, grant_jti
from monky_deployd.core.faults import TokenError
from monky_deployd.core.records.applied import Stored
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd.core.wire.checkin import HostFacts
from monky_deployd_testkit.fakes.estate import Estate
from monky_deployd_testkit.fakes.openbao import FakeBao
from monky_deployd_testkit.realbao import RealBao

ENV = "env-test-01"
BOTH = pytest.mark.parametrize("estate", ["fake", "real"], indirect=True)
TOKEN_INVALID = b'{"error":{"code":"TOKEN_INVALID","message":"the token is unknown"}}'


class TickFailed(Exception):
    """A tick that did not end idle, noop or applied: its record's code, message and outcome."""

    def __init__(self, rec: TickRecord) -> None:
        super().__init__(f"{rec.code}: {rec.message}")
        self.code, self.message, self.outcome = rec.code, rec.message, rec.outcome


class Box:
    """One box of the estate: its config, state dir and grant; ``tick()`` is one timer start.

    ``sockets=True``: over the fakes' loopback sockets, not in-process."""

    def __init__(
        self, estate: Estate[Any], tmp: Path, *, sockets: bool = False, **overrides: Any
    ) -> None:
        self.estate = estate
        self.state_dir = tmp / "state"
        self.state_dir.mkdir(mode=0o700, exist_ok=True)
        self.grant_file = estate.write_grant(tmp / "grant.jwt")
        raw = estate.config(state_dir=self.state_dir, grant_file=self.grant_file, **overrides)
        self.cfg = config.parse(raw, "test config")
        self.token_file = self.state_dir / "token.json"
        self.wire = None if (sockets or estate.real) else estate.wire()
        # The host facts a box caches after its first apply: no `docker version` per tick.
        StateDir(self.state_dir).ensure().write_host_facts(
            HostFacts(hostname=socket.gethostname(), docker="28.2.2", compose="2.36.2")
        )

    def client(self) -> httpx.Client:
        return transport.open_client(self.cfg, self.wire)

    def acquire(self) -> HeldToken:
        """The token phase alone (TokenKeeper.acquire), as the tick runs it."""
        with self.client() as client:
            return self._keeper(client).acquire()

    def _keeper(self, client: httpx.Client) -> TokenKeeper:
        cfg = self.cfg
        tenancy = Tenancy(client, cfg.tenancy, cfg.env, max_body_bytes=cfg.max_bundle_bytes)
        return TokenKeeper(cfg, Bao(client, cfg.openbao), tenancy, self.estate.clock.now)

    def tick(self) -> Stored:
        """One whole tick (run_tick); the token it held, as token.json records it. A tick that
        failed raises TickFailed with its code and message."""
        rec = run_tick(self.cfg, clock=self.estate.clock.now, wire=self.wire)
        if rec.outcome not in ("idle", "noop", "applied"):
            raise TickFailed(rec)
        held = self.state().token
        assert held is not None, "a tick that ended well left no token in token.json"
        return held

    def state(self) -> TokenState:
        return TokenState.from_json(self.token_file.read_bytes())


@pytest.fixture
def estate(request: pytest.FixtureRequest) -> Iterator[Estate[Any]]:
    """The fake estate; ``@BOTH`` tests also get one on the session's real OpenBao."""
    if getattr(request, "param", "fake") == "real":
        real: RealBao = request.getfixturevalue("real_bao")
        with Estate(env=ENV, real=real) as est:
            yield est
    else:
        with Estate(env=ENV) as fake:
            yield fake


@pytest.fixture
def box(estate: Estate[Any], tmp_path: Path) -> Box:
    return Box(estate, tmp_path)


def counts(est: Estate[Any]) -> dict[str, int]:
    return {
        "leases": len(est.tenancy.leases),
        "lease_requests": est.tenancy.lease_requests,
        "logins": est.bao.logins,
        "lookups": est.bao.lookups,
        "renewals": est.bao.renewals,
        "revocations": est.bao.revocations,
    }


def all_tokens(est: Estate[Any]) -> list[str]:
    return [rec.token for rec in est.bao.tokens.records()]


# -- R7: the budget --------------------------------------------------------------------------


@BOTH
def test_deploy_failing_every_tick_for_three_hours_spends_one_lease(
    estate: Estate[Any], tmp_path: Path
) -> None:
    box = Box(estate, tmp_path, sockets=True)  # this simulation over real loopback sockets
    estate.tenancy.set_raw_checkin(500, b'{"error":{"code":"BOOM","message":"deploy broken"}}')
    failures = 0
    for _ in range(180):
        try:
            box.tick()
        except TickFailed as err:
            assert err.code == "TENANCY_UNAVAILABLE"
            failures += 1
        estate.clock.advance(60)
    assert failures == 180
    c = counts(estate)
    assert c["leases"] == 1 and c["lease_requests"] == 1
    assert c["logins"] == 1
    assert c["lookups"] == 179  # every tick after the first asks lookup-self once


def test_a_thousand_noop_ticks_spend_no_lease_after_the_first(
    box: Box, estate: Estate[Any]
) -> None:
    kinds = {box.tick().kind for _ in range(1)}
    written = box.token_file.stat()
    for _ in range(999):
        estate.clock.advance(60)
        kinds.add(box.tick().kind)
    assert kinds == {"lease"}
    c = counts(estate)
    assert c["leases"] == 1 and c["lease_requests"] == 1 and c["logins"] == 1
    assert c["lookups"] == 999
    assert estate.tenancy.checkin_count == 1000
    now = box.token_file.stat()  # a steady-state tick writes nothing
    assert (now.st_ino, now.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


def test_a_week_of_ticks_renews_instead_of_leasing(box: Box, estate: Estate[Any]) -> None:
    for _ in range(7 * 24 * 6):  # every 10 minutes for a week
        assert box.tick().kind == "lease"
        estate.clock.advance(600)
    c = counts(estate)
    assert c["leases"] == 1 and c["logins"] == 1
    assert 7 <= c["renewals"] <= 10  # about one renewal per 18 h


def test_renewal_capped_short_rotates_with_the_lease_token_never_the_grant(
    box: Box, estate: Estate[Any]
) -> None:
    estate.bao.tokens.system_max_ttl_s = 30 * 3600  # leases cannot live beyond 30 h
    for _ in range(3 * 24 * 6):  # three days, every 10 minutes
        assert box.tick().kind == "lease"
        estate.clock.advance(600)
    c = counts(estate)
    assert c["logins"] == 1  # the grant was used once, at the very start
    assert 3 <= c["leases"] <= 4 and c["lease_requests"] == c["leases"]
    # every lease after the first was a rotation, so it descends from the same grant (jti)
    assert len({ls.jti for ls in estate.tenancy.leases}) == 1


def test_leases_shorter_than_renew_below_are_renewed_not_re_leased(tmp_path: Path) -> None:
    """A tenancy that mints 4 h leases while renew_below_s is 6 h must not be asked every tick."""
    with Estate(env=ENV, tenancy_kwargs={"lease_ttl_s": 4 * 3600}) as estate:
        box = Box(estate, tmp_path)
        for _ in range(24 * 60):  # a day of ticks
            assert box.tick().kind == "lease"
            estate.clock.advance(60)
        c = counts(estate)
        assert c["leases"] == 1 and c["lease_requests"] == 1 and c["logins"] == 1
        assert 10 <= c["renewals"] <= 13  # about every 2 h (half the minted TTL)


def test_non_renewable_lease_rotates_before_it_expires(box: Box, estate: Estate[Any]) -> None:
    box.tick()
    first = estate.tenancy.leases[0]
    estate.bao.tokens.get(estate.tenancy.lease_token(first.id)).renewable = False
    for _ in range(24 * 6):
        estate.clock.advance(600)
        box.tick()
    c = counts(estate)
    assert c["leases"] == 2 and c["logins"] == 1
    assert c["renewals"] == 0  # lookup-self says not renewable: no renew-self call


def test_a_failed_rotation_carries_on_with_the_lease_and_retries_next_tick(
    box: Box, estate: Estate[Any]
) -> None:
    box.tick()
    first = estate.tenancy.leases[0]
    record = estate.bao.tokens.get(estate.tenancy.lease_token(first.id))
    assert record is not None
    record.renewable = False
    estate.clock.advance(19 * 3600)  # 5 h left: below renew_below_s, rotation due
    estate.tenancy.fail_next(503, b'{"error":{"code":"DOWN","message":"x"}}', "/lease")
    assert box.tick().kind == "lease"  # the old lease token carried the tick
    lease_calls = [r for r in estate.tenancy.requests if r[1].endswith("/lease")]
    assert counts(estate)["leases"] == 1 and len(lease_calls) == 2
    estate.clock.advance(60)
    box.tick()
    lease_calls = [r for r in estate.tenancy.requests if r[1].endswith("/lease")]
    assert counts(estate)["leases"] == 2 and len(lease_calls) == 3
    assert counts(estate)["logins"] == 1


@BOTH
def test_a_rotation_revokes_the_old_lease_token_once_the_new_one_is_saved(
    box: Box, estate: Estate[Any], caplog: pytest.LogCaptureFixture
) -> None:
    first = box.tick()
    old = estate.tenancy.lease_token(estate.tenancy.leases[0].id)
    estate.bao.shorten(old, 300)  # 5 min left, and renew-self keeps that: the lease rotates
    estate.clock.advance(60)
    caplog.set_level(logging.INFO)
    new = box.tick()
    assert new.kind == "lease" and new.lease_id != first.lease_id
    assert box.state().token == new  # the new lease is in token.json
    with httpx.Client(trust_env=False) as client:
        bao = Bao(client, box.cfg.openbao)
        assert bao.lookup_self(old) is None  # 403: the old lease is dead
        assert bao.lookup_self(new.token) is not None
    live = [
        ls
        for ls in estate.tenancy.leases
        if estate.bao.live_token(estate.tenancy.lease_token(ls.id))
    ]
    assert len(live) == 1  # never two live leases
    c = counts(estate)
    assert (c["leases"], c["logins"], c["renewals"], c["revocations"]) == (2, 1, 1, 1)
    revoked = [r for r in caplog.records if getattr(r, "event", "") == "token.revoke"]
    assert len(revoked) == 1 and getattr(revoked[0], "ok", None) is True
    text = "\n".join(
        r.getMessage() + " " + json.dumps({k: str(v) for k, v in vars(r).items()})
        for r in caplog.records
    )
    assert not any(secret in text for secret in (old, new.token, estate.grant))
    estate.clock.advance(60)
    assert box.tick().lease_id == new.lease_id
    assert counts(estate)["revocations"] == 1  # one rotation, one revoke


def test_a_failed_revoke_is_a_warning_and_the_tick_goes_on(
    box: Box, estate: Estate[FakeBao], caplog: pytest.LogCaptureFixture
) -> None:
    box.tick()
    old = estate.tenancy.lease_token(estate.tenancy.leases[0].id)
    estate.bao.shorten(old, 300)
    estate.clock.advance(60)
    estate.bao.fail_next(500, b'{"errors":["internal error"]}', "/revoke-self")
    caplog.set_level(logging.INFO)
    new = box.tick()  # the rotation stands
    assert new.kind == "lease" and box.state().token == new
    warned = [r for r in caplog.records if getattr(r, "event", "") == "token.revoke"]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert "OPENBAO_UNAVAILABLE" in warned[0].getMessage()
    assert old not in warned[0].getMessage()
    assert estate.bao.live_token(old) is not None  # it expires on its own
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- rate limited ----------------------------------------------------------------------------


@BOTH
def test_rate_limited_while_the_bootstrap_token_works(
    box: Box, estate: Estate[Any], caplog: pytest.LogCaptureFixture
) -> None:
    estate.spend_lease_budget()
    requests_before = estate.tenancy.lease_requests
    caplog.set_level(logging.INFO)
    held = box.tick()
    assert held.kind == "bootstrap"  # the tick applies with it
    assert estate.tenancy.lease_requests == requests_before + 1
    retry = box.state().lease_not_before
    assert retry is not None and retry > estate.clock.now()
    limited = [r for r in caplog.records if getattr(r, "event", "") == "token.rate_limited"]
    assert limited and getattr(limited[0], "retry_after_s", 0) > 0
    # every 60 s until the budget frees up: no lease request, checkins keep working
    ticks = 0
    while estate.clock.now() + 60 < retry:
        estate.clock.advance(60)
        assert box.tick().kind == "bootstrap"
        ticks += 1
    assert ticks > 30
    assert estate.tenancy.lease_requests == requests_before + 1
    assert estate.tenancy.checkin_count == ticks + 1
    # the first tick after: the swap
    estate.clock.advance(60)
    assert box.tick().kind == "lease"
    assert estate.tenancy.lease_requests == requests_before + 2
    assert box.state().lease_not_before is None
    estate.clock.advance(60)
    assert box.tick().kind == "lease" and estate.tenancy.lease_requests == requests_before + 2


def test_rotation_rate_limited_keeps_the_lease_and_waits(box: Box, estate: Estate[Any]) -> None:
    box.tick()
    first = estate.tenancy.leases[0]
    record = estate.bao.tokens.get(estate.tenancy.lease_token(first.id))
    assert record is not None
    record.renewable = False
    estate.clock.advance(19 * 3600)  # 5 h left: rotation due
    estate.spend_lease_budget()
    asked = estate.tenancy.lease_requests
    assert box.tick().kind == "lease"  # 429 on the rotation: the old lease carries on
    assert estate.tenancy.lease_requests == asked + 1
    not_before = box.state().lease_not_before
    assert not_before is not None
    while estate.clock.now() + 60 < not_before:
        estate.clock.advance(60)
        assert box.tick().kind == "lease"
    assert estate.tenancy.lease_requests == asked + 1
    estate.clock.advance(60)
    box.tick()
    assert estate.tenancy.lease_requests == asked + 2
    held = box.state().token
    assert held is not None and held.lease_id != first.id
    assert counts(estate)["logins"] == 1 + 5  # the box's one login; the rest were other boxes


def test_rate_limited_with_no_working_token_refuses_with_the_time(
    tmp_path: Path,
) -> None:
    with Estate(env=ENV, bao_kwargs={"bootstrap_ttl_s": 30}) as estate:
        box = Box(estate, tmp_path)
        estate.spend_lease_budget()
        before = estate.tenancy.lease_requests
        with pytest.raises(TokenError) as exc:
            box.acquire()
        err = exc.value
        assert err.code == "LEASE_RATE_LIMITED" and err.outcome == "refused"
        not_before = box.state().lease_not_before
        assert not_before is not None
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(not_before))
        assert f"frees up at {when}" in err.message
        assert estate.tenancy.lease_requests == before + 1
        for _ in range(5):  # the next ticks do not ask again
            estate.clock.advance(60)
            with pytest.raises(TokenError) as again:
                box.acquire()
            assert again.value.code == "LEASE_RATE_LIMITED"
        assert estate.tenancy.lease_requests == before + 1
        estate.clock.advance(not_before - estate.clock.now() + 1)
        estate.bao.bootstrap_ttl_s = 900
        assert box.acquire().kind == "lease"
        assert estate.tenancy.lease_requests == before + 2


def test_a_lease_not_before_far_ahead_is_capped_at_the_budget_window(
    box: Box, estate: Estate[Any]
) -> None:
    """A clock that stepped backwards must not keep the box from leasing for days."""
    from monky_deployd.agent.token import TokenState as State

    far = estate.clock.now() + 10 * 86400
    box.token_file.write_bytes(State(ENV, None, far).to_json())
    assert box.tick().kind == "bootstrap"  # budget closed as far as the agent knows
    estate.clock.advance(3600 + 60)
    assert box.tick().kind == "lease"
    assert counts(estate)["leases"] == 1


# -- dead tokens and grants ------------------------------------------------------------------


@BOTH
def test_lease_revoked_and_grant_valid_logs_in_and_leases_once(
    box: Box, estate: Estate[Any]
) -> None:
    box.tick()
    estate.tenancy.revoke_lease(estate.tenancy.leases[0].id)
    estate.clock.advance(60)
    assert box.tick().kind == "lease"
    c = counts(estate)
    assert c["leases"] == 2 and c["logins"] == 2
    estate.clock.advance(60)
    box.tick()
    assert counts(estate)["leases"] == 2


def test_lease_expired_while_the_box_was_off(box: Box, estate: Estate[Any]) -> None:
    box.tick()
    estate.clock.advance(25 * 3600)  # the lease's 24 h are over, the grant's 3 days are not
    assert box.tick().kind == "lease"
    c = counts(estate)
    assert c["leases"] == 2 and c["logins"] == 2


def test_lease_and_grant_both_expired_is_grant_expired(box: Box, estate: Estate[Any]) -> None:
    box.tick()
    estate.clock.advance(4 * 86400)
    with pytest.raises(TickFailed) as exc:
        box.tick()
    assert exc.value.code == "GRANT_EXPIRED"
    assert "a new kit is needed for this environment" in exc.value.message
    assert counts(estate)["leases"] == 1


@BOTH
def test_token_rejected_by_tenancy_is_replaced_once(box: Box, estate: Estate[Any]) -> None:
    with box.client() as client:
        keeper = box._keeper(client)
        held = keeper.acquire()
        estate.bao.revoke(held.token)  # tenancy now answers 401 TOKEN_INVALID
        fresh = keeper.invalidate(held)
    assert fresh.kind == "lease" and fresh.token != held.token
    assert counts(estate)["leases"] == 2 and box.state().token is not None


@BOTH
def test_a_token_tenancy_rejects_at_checkin_is_replaced_once_within_the_tick(
    box: Box, estate: Estate[Any]
) -> None:
    """The tick's one re-acquire on TOKEN_INVALID (agent.tick.tick): a new token, a second check-in,
    and no third: rejected twice, the tick fails with TOKEN_INVALID."""

    def checkins() -> int:
        return sum(1 for r in estate.tenancy.requests if r[1].endswith("/checkin"))

    first = box.tick()
    estate.clock.advance(60)
    estate.tenancy.fail_next(401, TOKEN_INVALID, "/checkin")
    again = box.tick()
    assert again.kind == "lease" and again.lease_id != first.lease_id
    assert checkins() == 3
    assert counts(estate)["leases"] == 2 and counts(estate)["logins"] == 2
    estate.clock.advance(60)
    estate.tenancy.fail_next(401, TOKEN_INVALID, "/checkin", times=2)
    with pytest.raises(TickFailed) as exc:
        box.tick()
    assert exc.value.code == "TOKEN_INVALID"
    assert checkins() == 5 and counts(estate)["leases"] == 3


@BOTH
def test_superseded_grant_logs_in_then_tenancy_refuses(box: Box, estate: Estate[Any]) -> None:
    estate.tenancy.supersede(grant_jti(estate.grant))
    with pytest.raises(TickFailed) as exc:
        box.tick()
    assert exc.value.code == "GRANT_SUPERSEDED"
    assert "newer kit was revealed for this environment" in exc.value.message
    assert estate.bao.logins == 1  # the mount keeps no replay state: the login worked
    assert counts(estate)["leases"] == 0


@BOTH
def test_superseded_after_a_lease_is_refused_at_checkin(box: Box, estate: Estate[Any]) -> None:
    box.tick()
    estate.tenancy.supersede(grant_jti(estate.grant))
    estate.clock.advance(60)
    with pytest.raises(TickFailed) as exc:
        box.tick()
    assert exc.value.code == "GRANT_SUPERSEDED"
    assert counts(estate)["leases"] == 1 and estate.bao.logins == 1


@BOTH
def test_a_new_kit_after_supersession_logs_in_with_the_new_grant(
    box: Box, estate: Estate[Any]
) -> None:
    box.tick()
    estate.tenancy.supersede(grant_jti(estate.grant))
    estate.clock.advance(60)
    with pytest.raises(TickFailed) as exc:
        box.tick()
    assert exc.value.code == "GRANT_SUPERSEDED"
    new_grant = estate.issuer.mint(ENV)
    estate.write_grant(box.grant_file, new_grant)  # the operator installs the kit
    estate.clock.advance(60)
    assert box.tick().kind == "lease"
    c = counts(estate)
    assert c["logins"] == 2 and c["leases"] == 2
    assert box.state().token is not None
    assert box.state().token.grant_jti == grant_jti(new_grant)  # type: ignore[union-attr]
    estate.clock.advance(60)
    box.tick()
    assert counts(estate)["logins"] == 2  # the same grant again: no new login


@BOTH
def test_openbao_sealed_names_openbao_and_keeps_the_lease(box: Box, estate: Estate[Any]) -> None:
    box.tick()
    estate.bao.sealed = True
    estate.clock.advance(60)
    with pytest.raises(TickFailed) as exc:
        box.tick()
    assert exc.value.code == "OPENBAO_SEALED"
    assert f"OpenBao at 127.0.0.1:{estate.bao.port}" in exc.value.message
    estate.bao.sealed = False
    estate.clock.advance(60)
    assert box.tick().kind == "lease"
    assert counts(estate)["leases"] == 1 and counts(estate)["logins"] == 1


# -- the token file --------------------------------------------------------------------------


def test_token_file_is_private_and_no_token_reaches_a_log_line(
    box: Box, estate: Estate[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    box.tick()
    estate.tenancy.revoke_lease(estate.tenancy.leases[0].id)
    estate.clock.advance(19 * 3600)
    box.tick()
    estate.clock.advance(19 * 3600)
    box.tick()
    estate.clock.advance(60)
    box.tick()
    assert (box.token_file.stat().st_mode & 0o777) == 0o600
    assert counts(estate)["renewals"] == 1
    text = "\n".join(
        r.getMessage() + " " + json.dumps({k: str(v) for k, v in vars(r).items()})
        for r in caplog.records
    )
    secrets = [*all_tokens(estate), estate.grant]
    assert secrets and not any(s in text for s in secrets)
    events = {getattr(r, "event", "") for r in caplog.records}
    assert {"token.login", "token.lease", "token.reuse", "token.renew"} <= events


@BOTH
def test_torn_temp_files_next_to_a_good_record_are_ignored(box: Box, estate: Estate[Any]) -> None:
    box.tick()
    good = box.token_file.read_bytes()
    (box.state_dir / ".token.json.abc123.tmp").write_bytes(good[: len(good) // 2])
    (box.state_dir / ".token.json.def456.tmp").write_bytes(b"")
    estate.clock.advance(60)
    assert box.tick().kind == "lease"
    assert counts(estate)["leases"] == 1


def test_a_corrupt_record_costs_a_lease_and_says_so(
    box: Box, estate: Estate[Any], caplog: pytest.LogCaptureFixture
) -> None:
    box.tick()
    raw = box.token_file.read_bytes()
    box.token_file.write_bytes(raw[: len(raw) // 2])
    caplog.set_level(logging.WARNING)
    estate.clock.advance(60)
    assert box.tick().kind == "lease"
    assert counts(estate)["leases"] == 2
    warn = [r for r in caplog.records if getattr(r, "event", "") == "token.state_corrupt"]
    assert warn and "costs a login and a lease" in warn[0].getMessage()


_WRITER = r"""
import json, sys
from pathlib import Path
from monky_deployd.adapters.fsutil import atomic_write
path, good = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
pad = "x" * (32 << 20)
payloads = [json.dumps(dict(good, pad=pad, round=i)).encode() for i in (0, 1)]
print("ready", flush=True)
i = 0
while True:  # nearly all the time of this loop is spent inside atomic_write
    atomic_write(path, payloads[i % 2], 0o600)
    i += 1
"""


def test_a_writer_killed_mid_write_leaves_a_usable_token(
    box: Box, estate: Estate[Any], tmp_path: Path
) -> None:
    """SIGKILL a process rewriting token.json (32 MB records) at arbitrary moments: each time
    the next tick still reads a whole record and reuses the lease."""
    box.tick()
    snapshot = tmp_path / "good.json"
    snapshot.write_bytes(box.token_file.read_bytes())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    interrupted = 0
    for attempt in range(12):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(box.token_file), str(snapshot)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.05 + 0.037 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        torn = list(box.state_dir.glob(".token.json.*.tmp"))
        interrupted += bool(torn)
        estate.clock.advance(60)
        assert box.tick().kind == "lease"
        assert box.state().token is not None
        assert not any(p.exists() for p in torn), "the tick sweeps a killed writer's temporary"
        if interrupted >= 3:
            break
    assert interrupted >= 1, "no kill landed inside a write; the test proved nothing"
    assert counts(estate)["leases"] == 1 and counts(estate)["logins"] == 1


# -- whole ticks (tick.run_tick in-process on the fake clock; the real CLI as a subprocess) ---


def _tick_cfg(estate: Estate[Any], tmp: Path) -> config.Config:
    grant = estate.write_grant(tmp / "grant.jwt")
    raw = estate.config(state_dir=tmp / "state", grant_file=grant, lock_wait_s=1)
    return config.parse(raw, "test config")


@BOTH
def test_whole_ticks_failing_deploy_for_three_hours_spend_one_lease(
    estate: Estate[Any], tmp_path: Path
) -> None:
    from monky_deployd.agent.tick import tick

    estate.tenancy.set_desired(
        "r1",
        {
            "project": "shop",
            "compose": "services:\n  web:\n    image: busybox\n",
            "env_template": "A=${A}\n",
            "manifest": [{"name": "A", "path": f"envs/{ENV}/never-written", "key": "a"}],
        },
    )
    cfg = _tick_cfg(estate, tmp_path)
    codes: list[str] = []
    for _ in range(180):
        rec = tick.run_tick(
            cfg, clock=estate.clock.now, wire=None if estate.real else estate.wire()
        )
        codes.append(str(rec.code))
        estate.clock.advance(60)
    # the deploy fails on every attempt (secret absent); between attempts it backs off
    assert set(codes) == {"ENV_INCOMPLETE", "APPLY_BACKOFF"}
    assert estate.tenancy.report_count == codes.count("ENV_INCOMPLETE") <= 12
    assert estate.tenancy.checkin_count == 180
    c = counts(estate)
    assert c["leases"] == 1 and c["lease_requests"] == 1 and c["logins"] == 1


def _cli(config_path: Path, tmp: Path) -> tuple[int, list[dict[str, Any]]]:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        (
            sys.executable,
            "-m",
            "monky_deployd.cli",
            "apply",
            "--once",
            "--config",
            str(config_path),
        ),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()]
    return proc.returncode, lines


@BOTH
def test_cli_superseded_grant_is_the_first_error_line_and_the_exit_code(
    estate: Estate[Any], tmp_path: Path
) -> None:
    import yaml

    from monky_deployd.core.errors import EXIT_REFUSED

    grant = estate.write_grant(tmp_path / "grant.jwt")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(estate.config(state_dir=tmp_path / "state", grant_file=grant)))
    estate.tenancy.supersede(grant_jti(estate.grant))  # a newer kit was revealed
    rc, lines = _cli(path, tmp_path)
    assert rc == EXIT_REFUSED
    errors = [ln for ln in lines if ln.get("level") == "ERROR"]
    assert errors and errors[0]["code"] == "GRANT_SUPERSEDED"
    assert "newer kit was revealed for this environment" in errors[0]["message"]
    assert lines[-1]["event"] == "tick.summary" and lines[-1]["code"] == "GRANT_SUPERSEDED"
    fault = errors[0]["message"].split(" Check:")[0].lower()  # the sentence before the hint
    assert not any(word in fault for word in ("network", "unreachable", "policy", "intercept"))
    assert "not a network or policy fault" in errors[0]["message"]
    assert estate.bao.logins == 1  # the grant still logs in: no replay state
    assert len(estate.tenancy.leases) == 0


@pytest.mark.docker
def test_whole_ticks_rate_limited_apply_with_bootstrap_then_swap(
    tmp_path: Path, registry: Any, busybox_image: str
) -> None:
    from monky_deployd.agent.tick import tick
    from monky_deployd_testkit.lab import Lab

    image = registry.push(busybox_image, "env-e2e-01/web", "1.0")
    with Lab(tmp_path, registry, image, db_password="pw") as lab:
        est = lab.estate
        est.tenancy.set_desired("r1", lab.bundle())
        est.spend_lease_budget()
        asked = est.tenancy.lease_requests
        cfg = config.load(lab.config_path)
        token_file = cfg.state_dir / "token.json"

        rec = tick.run_tick(cfg, clock=est.clock.now)
        assert rec.outcome == "applied", rec.message  # applied with the bootstrap token
        state = TokenState.from_json(token_file.read_bytes())
        assert state.token is not None and state.token.kind == "bootstrap"
        assert state.lease_not_before is not None
        assert est.tenancy.lease_requests == asked + 1

        while est.clock.now() + 300 < state.lease_not_before:
            est.clock.advance(300)
            rec = tick.run_tick(cfg, clock=est.clock.now)
            assert rec.outcome == "noop", rec.message
        assert est.tenancy.lease_requests == asked + 1  # not asked again before retry_after_s

        est.clock.advance(300)
        rec = tick.run_tick(cfg, clock=est.clock.now)
        assert rec.outcome == "noop", rec.message
        after = TokenState.from_json(token_file.read_bytes())
        assert after.token is not None and after.token.kind == "lease"  # the swap
        assert est.tenancy.lease_requests == asked + 2
