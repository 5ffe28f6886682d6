"""The one polling helper: wait until a condition holds, with a generous deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(pred: Callable[[], T], what: str = "the condition", *, timeout: float = 60.0, interval: float = 0.05) -> T:
    """Call ``pred`` until it returns something truthy and return that; fail after ``timeout`` s.

    The deadline only bounds a hang: it is generous and no test claims a speed with it.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
