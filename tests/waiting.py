"""Waiting in tests for something another process or thread does, with a deadline that only a hang reaches:
the test asserts the outcome, never how long it took."""
import time


def wait_until(predicate, what: str, timeout_s: float = 120.0):
    """``predicate()``'s first truthy value, asked every 20 ms; an AssertionError naming ``what`` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"waited {timeout_s:.0f} s for {what}")
