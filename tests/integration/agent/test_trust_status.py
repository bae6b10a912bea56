"""``status`` on signed bundles: the running revision's release from trust.json, and whether
its signatures have expired (the revision keeps running: only status says so)."""

from __future__ import annotations

from pathlib import Path

from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent.apply import trust as performed
from monky_deployd.core.commands import status
from monky_deployd.core.signing import trust

EXPIRES = "2027-01-15T00:00:00Z"


def test_status_says_when_the_running_release_s_signatures_expired(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state").ensure()
    assert performed.running(state, "r1", 0.0) is None  # nothing verified was ever applied
    at = trust.parse_time(EXPIRES)
    assert at is not None
    floor = trust.after_apply(None, "r1", trust.Release(3, at, EXPIRES))
    state.write_trust(trust.after_apply(floor, "r2", trust.Release(2, at, EXPIRES)))
    assert (state.root / "trust.json").stat().st_mode & 0o777 == 0o600

    before = performed.running(state, "r2", at - 1)
    after = performed.running(state, "r2", at)
    assert before is not None and after is not None
    assert (before["running_version"], before["running_expired"]) == (2, False)
    assert (after["highest_version"], after["highest_revision"]) == (3, "r1")
    assert after["running_expired"] is True and after["running_expires"] == EXPIRES
    assert "signatures EXPIRED at 2027-01-15T00:00:00Z" in status._signatures(after)
    assert "signed, valid until" in status._signatures(before)
    unverified = performed.running(state, "r9", at)
    assert unverified is not None and unverified["running_version"] is None
    assert "not verified" in status._signatures(unverified)


def test_an_unreadable_trust_record_counts_as_absent(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state").ensure()
    (state.root / "trust.json").write_bytes(b"{torn")
    assert state.read_trust() is None
