"""CancelToken: a flag engines poll, with hooks that run once."""

from __future__ import annotations

import threading

from voxpipe.engines.base import CancelToken


def test_hooks_run_once_on_cancel() -> None:
    token = CancelToken()
    calls: list[str] = []
    token.on_cancel(lambda: calls.append("a"))
    token.on_cancel(lambda: calls.append("b"))
    assert not token.cancelled and calls == []
    token.cancel()
    token.cancel()
    assert token.cancelled
    assert calls == ["a", "b"]


def test_on_cancel_after_cancel_runs_at_once() -> None:
    token = CancelToken()
    token.cancel()
    calls: list[int] = []
    unregister = token.on_cancel(lambda: calls.append(1))
    assert calls == [1]
    unregister()  # harmless
    token.cancel()
    assert calls == [1]


def test_unregister_removes_the_hook() -> None:
    token = CancelToken()
    calls: list[str] = []
    unregister = token.on_cancel(lambda: calls.append("gone"))
    token.on_cancel(lambda: calls.append("kept"))
    unregister()
    unregister()  # twice is fine
    token.cancel()
    assert calls == ["kept"]


def test_a_hook_may_register_another_without_deadlock() -> None:
    token = CancelToken()
    calls: list[str] = []

    def outer() -> None:
        token.on_cancel(lambda: calls.append("inner"))  # already cancelled: runs at once

    token.on_cancel(outer)
    token.cancel()
    assert calls == ["inner"]


def test_cancel_from_many_threads_runs_each_hook_once() -> None:
    token = CancelToken()
    calls: list[int] = []
    for i in range(50):
        token.on_cancel(lambda i=i: calls.append(i))  # type: ignore[misc]
    threads = [threading.Thread(target=token.cancel) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2)
    assert sorted(calls) == list(range(50))
