"""grant.read_grant: the grant file as the kit installs it, and every way it can be missing or not
hold a JWT (real files; logging in with it is in tests/integration/net/test_bao.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monky_deployd.adapters.box.grant import read_grant
from monky_deployd.core.faults import TokenError


def test_read_grant_missing_unreadable_empty(tmp_path: Path) -> None:
    with pytest.raises(TokenError) as exc:
        read_grant(tmp_path / "absent.jwt")
    assert exc.value.code == "GRANT_MISSING" and "absent.jwt" in exc.value.message
    (tmp_path / "dir.jwt").mkdir()
    with pytest.raises(TokenError) as exc:
        read_grant(tmp_path / "dir.jwt")
    assert exc.value.code == "GRANT_UNREADABLE"
    (tmp_path / "empty.jwt").write_text("\n")
    with pytest.raises(TokenError) as exc:
        read_grant(tmp_path / "empty.jwt")
    assert exc.value.code == "GRANT_UNREADABLE" and "empty" in exc.value.message
    (tmp_path / "junk.jwt").write_text("not a jwt at all\n")
    with pytest.raises(TokenError) as exc:
        read_grant(tmp_path / "junk.jwt")
    assert exc.value.code == "GRANT_UNREADABLE" and "not a jwt" not in exc.value.message
