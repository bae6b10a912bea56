"""``dialhttp.bounded``'s patience: a call that has not answered after ``patience_s`` gets one
``impatient()`` in the caller's thread (the SDK's load asks the controller why it hangs); what
that raises ends the wait, unless the call answered meanwhile. A call that answers in time never
makes it run: a steady tick's load never asks the controller."""

from __future__ import annotations

import threading

import pytest

from monky_deployd.adapters.net.dialhttp import bounded


class Named(Exception):
    pass


def test_a_call_that_answers_in_time_never_asks() -> None:
    asked: list[int] = []
    got = bounded(
        lambda: 7, 30.0, discard=lambda _: None, patience_s=10.0, impatient=lambda: asked.append(1)
    )
    assert got == 7 and asked == []


def test_what_the_impatient_side_raises_ends_a_hanging_call() -> None:
    release = threading.Event()
    discarded: list[str] = []
    asked: list[int] = []

    def impatient() -> None:
        asked.append(1)
        raise Named("the identity may dial no service")

    def call() -> str:
        release.wait(60)
        return "late"

    with pytest.raises(Named):
        bounded(
            call,
            60.0,
            discard=discarded.append,
            patience_s=0.05,
            impatient=impatient,
        )
    assert asked == [1]
    release.set()  # the abandoned call's late answer is discarded, not returned
    for _ in range(200):
        if discarded:
            break
        threading.Event().wait(0.01)
    assert discarded == ["late"]


def test_an_impatient_side_that_names_nothing_lets_the_call_answer() -> None:
    release = threading.Event()
    asked: list[int] = []

    def impatient() -> None:
        asked.append(1)
        release.set()  # the controller named nothing; meanwhile the call answers

    got = bounded(
        lambda: release.wait(60) and "loaded",
        60.0,
        discard=lambda _: None,
        patience_s=0.05,
        impatient=impatient,
    )
    assert got == "loaded" and asked == [1]


def test_an_impatient_side_that_names_nothing_still_times_out() -> None:
    asked: list[int] = []
    with pytest.raises(TimeoutError):
        bounded(
            lambda: threading.Event().wait(60),
            0.3,
            discard=lambda _: None,
            patience_s=0.05,
            impatient=lambda: asked.append(1),
        )
    assert asked == [1]
