"""core.lifecycle.halfdone: what compose's replacement leaves when a kill lands between its steps,
and the repair that makes one container per service and number under its own name, keeping what
runs. Each step of compose's replacement is replayed over generated projects and cut at every
point; the repair of any cut leaves no temporary name, no duplicate, and every container that
ran before still running."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.lifecycle.halfdone import Seen, plan

PROJECT = "shop"
STEPS = ("create", "stop", "destroy", "rename", "start")


def container(service: str, number: str, state: str, created: int, cid: str) -> Seen:
    return Seen(service, number, f"{PROJECT}-{service}-{number}", state, created, cid)


def cut(olds: list[Seen], upto: dict[int, int], t: int) -> list[Seen]:
    """The project after each old container's replacement was cut after ``upto[i]`` steps."""
    found: list[Seen] = []
    for i, old in enumerate(olds):
        steps = upto.get(i, 0)
        new_id = f"{t + i:012x}" + "f" * 52
        tmp_name = f"{old.container_id[:12]}_{old.name}"
        old_state = old.state if steps < 2 else "exited"
        if steps < 3:
            found.append(
                Seen(old.service, old.number, old.name, old_state, old.created, old.container_id)
            )
        if steps >= 1:
            name = tmp_name if steps < 4 else old.name
            state = "running" if steps >= 5 else "created"
            found.append(Seen(old.service, old.number, name, state, t + i, new_id))
    return found


services = st.lists(
    st.tuples(st.sampled_from(["web", "db", "worker"]), st.sampled_from(["1", "2"])),
    min_size=1,
    max_size=4,
    unique=True,
)


@given(services, st.data())
def test_any_cut_of_compose_replacement_repairs_to_one_container_each_keeping_what_runs(
    names: list[tuple[str, str]], data: st.DataObject
) -> None:
    olds = [
        container(s, n, data.draw(st.sampled_from(["running", "exited"])), 100 + i, f"{i:02x}" * 32)
        for i, (s, n) in enumerate(names)
    ]
    upto = {i: data.draw(st.integers(0, len(STEPS))) for i in range(len(olds))}
    box = cut(olds, upto, 1000)
    fix = plan(box)
    gone = {c.container_id for c in fix.remove}
    left = [c for c in box if c.container_id not in gone]
    renamed = {c.container_id for c in fix.rename}
    final = [c.own_name if c.container_id in renamed else c.name for c in left]
    # at most one container per service and number, under its own name; none only where the
    # cut left nothing but a replacement never started (after the old one's removal): up makes it
    gone_whole = sorted(names[i] for i, u in upto.items() if u == 3)
    assert sorted((c.service, c.number) for c in left) == sorted(
        n for n in names if n not in gone_whole
    )
    assert sorted(final) == sorted(
        f"{PROJECT}-{s}-{n}" for s, n in names if (s, n) not in gone_whole
    )
    # what ran keeps running: a running container is never removed
    assert not any(c.state == "running" for c in fix.remove)
    # nothing to do when nothing was cut, and a repaired box needs nothing more
    if all(u in (0, len(STEPS)) for u in upto.values()):
        assert not fix
    after = [
        Seen(c.service, c.number, c.own_name, c.state, c.created, c.container_id)
        if c.container_id in renamed
        else c
        for c in left
    ]
    assert not plan(after)


def test_a_replacement_never_started_is_removed_and_the_running_one_kept() -> None:
    old = container("web", "1", "running", 1, "a" * 64)
    tmp = Seen("web", "1", f"{'a' * 12}_shop-web-1", "created", 2, "b" * 64)
    fix = plan([old, tmp])
    assert fix.remove == (tmp,) and fix.rename == ()
    assert fix.lines() == [f"removed {tmp.name} (web, created, bbbbbbbbbbbb)"]


def test_one_off_containers_are_never_touched() -> None:
    run = Seen("web", "1", f"{'c' * 12}_shop-web-run", "created", 3, "c" * 64, oneoff=True)
    assert not plan([run, container("web", "1", "running", 1, "a" * 64)])
