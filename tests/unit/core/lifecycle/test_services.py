"""core.lifecycle.services.repo_digest: the one rule for which RepoDigest is a compose
reference's."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.lifecycle.services import repo_digest

names = st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True)
hosts = st.one_of(
    st.just(""), st.from_regex(r"[a-z]{1,6}(\.[a-z]{1,4})?(:[0-9]{2,5})?/", fullmatch=True)
)
digests = st.from_regex(r"sha256:[0-9a-f]{8}", fullmatch=True)


@given(
    hosts,
    st.lists(names, min_size=1, max_size=3),
    st.none() | names,
    st.none() | digests,
    digests,
    st.lists(st.tuples(hosts, names, digests), max_size=4),
    st.randoms(),
)
def test_the_digest_of_the_named_repository_wins_wherever_it_is_listed(
    host: str,
    path: list[str],
    tag: str | None,
    pinned: str | None,
    own: str,
    others: list[tuple[str, str, str]],
    rnd: random.Random,
) -> None:
    repo = host + "/".join(path)
    ref = repo + (f":{tag}" if tag else "") + (f"@{pinned}" if pinned else "")
    known = [f"{h}{n}x@{d}" for h, n, d in others] + [f"{repo}@{own}"]
    rnd.shuffle(known)
    assert repo_digest(ref, known) == f"{repo}@{own}"


@given(st.lists(st.from_regex(r"other[a-z]{0,4}@sha256:[0-9a-f]{4}", fullmatch=True), max_size=3))
def test_without_the_repository_the_first_known_or_nothing(known: list[str]) -> None:
    assert repo_digest("harbor.example.net:443/env/web:1.4", known) == (known[0] if known else "")
