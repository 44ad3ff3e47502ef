"""Progress of long parses: readers report the raw bytes they read to whoever is listening.

A caller (the CLI's progress bar) listens with ``with reporting(callback): ...``; readers call
``advance(nbytes)`` as they read. Nobody listening costs one context-variable lookup per piece read.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

_listener: ContextVar[Callable[[int], None] | None] = ContextVar("perfsight_ingest_progress", default=None)


def advance(nbytes: int) -> None:
    listener = _listener.get()
    if listener is not None:
        listener(nbytes)


@contextmanager
def reporting(callback: Callable[[int], None]) -> Iterator[None]:
    token = _listener.set(callback)
    try:
        yield
    finally:
        _listener.reset(token)
