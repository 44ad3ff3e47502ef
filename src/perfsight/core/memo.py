"""The per-run result memo: every analysis of a run computed once, whoever asks, within a memory bound.

``computed(fn, tables, *args, **kwargs)`` is ``fn(tables, *args, **kwargs)``, kept in ``tables.memo`` (each
``RunTables`` owns one ``Memo``; ``dataclasses.replace`` and ``with_meta`` make tables with an empty one, and
assigning one of a ``RunTables``' tables empties it). Every caller of an analysis goes through it: another
analysis, ``Run``'s methods, the run summary and the advisor, export, the terminal report, the web server.

* Key: the function's module and qualified name (so a ``functools.wraps`` wrapper shares its function's
  entries; a lambda or a nested function, whose name does not tell it apart, is keyed by itself), and its
  arguments bound to its signature with the defaults applied and made hashable (a list or tuple as a tuple, a
  dict by sorted keys, every value with its type): ``op_instances(t)`` and ``op_instances(t, kinds=None)`` are
  one entry, ``kinds=["a"]`` and ``kinds=("a",)`` too, ``level=1`` and ``level=True`` are not. An argument
  that cannot be hashed is a TypeError naming it.
* Bound: the kept results' sizes (``result_bytes``) stay within ``capacity_bytes`` (by default
  ``MEMO_MEMORY_SHARE`` of the machine's memory, per run); the least recently used go first, and a result
  larger than the whole capacity is returned without being kept.
* Threads: one computation per key at a time. A caller asking for a key that is being computed waits for that
  computation and gets its result (or its exception: then nothing is kept and the next caller computes again).
  Analyses call other analyses but never in a circle, so a computation never waits for itself (one that
  asks for its own key is a RuntimeError, not a hang).

Results are shared by every caller: they must not be changed (Arrow tables cannot be).
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

T = TypeVar("T")

#: the share of the machine's physical memory one run's memo may keep (the web server keeps a few runs open)
MEMO_MEMORY_SHARE = 0.125


def computed(fn: Callable[..., T], tables, /, *args, **kwargs) -> T:
    """``fn(tables, *args, **kwargs)``, computed once per run and equivalent arguments (module docstring)."""
    return tables.memo.result(fn, tables, args, kwargs)


@functools.cache
def default_capacity() -> int:
    """``MEMO_MEMORY_SHARE`` of the machine's physical memory, in bytes."""
    import psutil

    return int(psutil.virtual_memory().total * MEMO_MEMORY_SHARE)


class Memo:
    """Results of functions of one run's tables, by key, least recently used first out (module docstring)."""

    def __init__(self, capacity_bytes: int | None = None):
        self.capacity_bytes = default_capacity() if capacity_bytes is None else capacity_bytes
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()   # key -> (result, its bytes)
        self._kept_bytes = 0
        self._running: dict[tuple, tuple[Future, int]] = {}              # key -> (computation under way, thread)
        self._generation = 0                                              # advanced by clear()

    def __reduce__(self):
        return Memo, (self.capacity_bytes,)      # a pickled or deep-copied run's tables start with an empty memo

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)

    @property
    def kept_bytes(self) -> int:
        """The summed sizes of the kept results."""
        with self._lock:
            return self._kept_bytes

    def result(self, fn: Callable[..., T], tables, args: tuple, kwargs: dict) -> T:
        """``fn(tables, *args, **kwargs)``: kept, being computed (waited for), or computed now."""
        key = memo_key(fn, args, kwargs)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key][0]
            under_way = self._running.get(key)
            if under_way is None:
                running: Future = Future()
                self._running[key] = (running, threading.get_ident())
                generation = self._generation
            elif under_way[1] == threading.get_ident():
                raise RuntimeError(f"{key[0]} asks for its own result: analyses must not call themselves")
        if under_way is not None:
            return under_way[0].result()
        try:
            value = fn(tables, *args, **kwargs)
        except BaseException as error:
            self._finish(key, running, generation, None)
            running.set_exception(error)
            raise
        self._finish(key, running, generation, (value,))
        running.set_result(value)
        return value

    def _finish(self, key: tuple, running: Future, generation: int, kept: tuple | None) -> None:
        """The computation of ``key`` is over: keep its result (``kept``, a 1-tuple) unless the memo was
        cleared meanwhile (the tables changed), and evict least recently used results past the capacity."""
        size = result_bytes(kept[0]) if kept is not None else 0
        with self._lock:
            if self._running.get(key, (None,))[0] is running:
                del self._running[key]
            if kept is None or generation != self._generation or size > self.capacity_bytes:
                return
            self._kept[key] = (kept[0], size)
            self._kept_bytes += size
            while self._kept_bytes > self.capacity_bytes:
                _, (_, evicted) = self._kept.popitem(last=False)
                self._kept_bytes -= evicted

    def clear(self) -> None:
        """Forget every result, and keep none of the computations under way (their tables changed)."""
        with self._lock:
            self._kept.clear()
            self._kept_bytes = 0
            self._running.clear()
            self._generation += 1


@functools.cache
def _signature(fn: Callable) -> inspect.Signature:
    return inspect.signature(fn)


def memo_key(fn: Callable, args: tuple, kwargs: dict) -> tuple:
    """The key of ``fn(tables, *args, **kwargs)`` (module docstring): the function's name, then each
    argument after the tables (defaults applied) as (name, hashable value)."""
    name = f"{fn.__module__}.{fn.__qualname__}"
    bound = _signature(fn).bind(None, *args, **kwargs)       # None stands for the tables
    bound.apply_defaults()
    key: list = [fn if "<" in fn.__qualname__ else name]     # a lambda or nested function is itself
    for parameter, value in list(bound.arguments.items())[1:]:
        try:
            key.append((parameter, _hashable(value)))
        except TypeError:
            raise TypeError(f"{name}: argument {parameter} (a {type(value).__name__}) cannot be part of a memo key; "
                            "expected numbers, text, None, or lists, tuples, sets and dicts of them") from None
    return tuple(key)


def _hashable(value) -> tuple:
    if isinstance(value, (list, tuple)):
        return (tuple, tuple(_hashable(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return (frozenset, frozenset(_hashable(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple(sorted(((_hashable(k), _hashable(v)) for k, v in value.items()), key=repr)))
    hash(value)                                  # TypeError for an unhashable value
    return (type(value), value)


def result_bytes(value, seen: set[int] | None = None) -> int:
    """The memory ``value`` holds, estimated: ``nbytes`` where it says (Arrow tables and arrays, numpy
    arrays, an object that declares it), containers and objects' attributes summed (each object once), the
    rest by ``sys.getsizeof``. A container of more than ``SIZE_SAMPLE`` items counts that many of them, evenly
    spaced, scaled to its length (a critical-path graph holds millions of numbers in lists). A run's tables
    (anything with a ``Memo`` as ``memo``) count nothing: the run owns them."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(getattr(value, "memo", None), Memo):
        return 0
    own = sys.getsizeof(value)
    if isinstance(value, dict):
        return own + _summed(list(value.items()), lambda kv: result_bytes(kv[0], seen) + result_bytes(kv[1], seen))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = value if isinstance(value, (list, tuple)) else list(value)
        return own + _summed(items, lambda item: result_bytes(item, seen))
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return own + result_bytes(vars(value), seen)
    return own


#: the most items of one container ``result_bytes`` looks at
SIZE_SAMPLE = 256


def _summed(items: list | tuple, size: Callable[[Any], int]) -> int:
    """The summed ``size`` of ``items``, or of ``SIZE_SAMPLE`` of them evenly spaced, scaled to all."""
    if len(items) <= SIZE_SAMPLE:
        return sum(map(size, items))
    sample = [items[i * len(items) // SIZE_SAMPLE] for i in range(SIZE_SAMPLE)]
    return sum(map(size, sample)) * len(items) // SIZE_SAMPLE
