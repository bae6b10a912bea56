"""agent.policy.resolve: a bind mount's host path as the engine will follow it (real files and
links): a link to a protected path is judged by where it leads, a part not there yet is kept as
written, a link the agent cannot follow (a loop) is no path at all, so refused."""

from __future__ import annotations

import os
from pathlib import Path

from monky_deployd.agent.policy import resolve
from monky_deployd.core.admission import policy
from monky_deployd.core.admission import rules as terms
from monky_deployd.core.errors import Code


def test_links_are_followed_missing_parts_kept_and_a_loop_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    (root / "a").mkdir(parents=True)
    os.symlink("/etc", root / "a" / "etc-link")
    os.symlink(root / "a" / "etc-link", root / "second")  # a chain of links
    os.symlink(root / "loop", root / "loop")
    assert resolve(f"{root}/a/etc-link/ssl/") == "/etc/ssl"
    assert resolve(f"{root}/second") == "/etc"
    assert resolve(f"{root}/new/data") == f"{root}/new/data"
    assert resolve(f"{root}/loop/x") == ""

    rules = terms.Rules(allow=terms.Allow(bind_roots=(str(root),)), protected=("/", "/etc"))
    for source, code in (
        (f"{root}/a/etc-link/ssl", Code.POLICY_PROTECTED_PATH),
        (f"{root}/loop/x", Code.POLICY_REFUSED),
        (f"{root}/new/data", None),
    ):
        vol = [{"type": "bind", "source": source, "target": "/m"}]
        found = policy.judge(
            {"services": {"web": {"volumes": vol}}}, rules, {source: resolve(source)}
        )
        assert [v.code for v in found] == ([] if code is None else [code]), source
