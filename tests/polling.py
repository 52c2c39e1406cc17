"""Waiting on a state in tests: poll until it holds. The limit only guards against a hang (it is
generous and no test asserts how long anything took)."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll_until(fetch: Callable[[], T], done: Callable[[T], bool], hang_guard_s: float = 300) -> T:
    """`fetch()` again every 50 ms until `done` holds for what it returned; that is returned."""
    deadline = time.monotonic() + hang_guard_s
    while True:
        seen = fetch()
        if done(seen):
            return seen
        assert time.monotonic() < deadline, f"never reached the expected state: {seen}"
        time.sleep(0.05)
