"""Intercepting the tunable torch functions where torch code calls them, and only while a bank needs it.

This module owns the patches behind ``apply.TunedMode``: while modes are entered, each module attribute
of ``candidates.CALLED_THROUGH`` for an op that some entered mode has winners for (its ``ops``) is
replaced by a wrapper of the original function; when the last mode needing it leaves, the original is
put back. Every other torch call runs untouched, with no Python in its path (a ``TorchFunctionMode``
would see every torch function call: ~10% of a small model's step, bench/RESULTS.md).

The wrapper asks the modes entered on the calling thread, innermost first, for a winner
(``mode.choose(func, args, kwargs)``) and runs the first one found through ``candidates.run`` with the
original function; without one it calls the original. Entering and leaving are re-entrant (a mode may be
entered again, modes may nest and leave in any order) and take a lock, so concurrent threads cannot
corrupt the patches; the patch is process-wide, but calls from threads that entered no mode fall through.
An attribute that someone else replaced meanwhile is left as they set it. Calls traced by
``torch.compile`` fall through too (the compiled graph then holds the original function). Before the
first patch, the registries torch builds lazily from these attributes are built from the originals
(``_prime``).
"""
from __future__ import annotations

import functools
import threading
from typing import Callable

import torch

from perfsight.tune.candidates import CALLED_THROUGH, FUNCS, run

_lock = threading.Lock()
_entered: tuple = ()  # (thread id, mode) per entry, innermost last; replaced whole, never mutated
_wrappers: dict[Callable, Callable] = {}


def _wrapper(func: Callable) -> Callable:
    if func not in _wrappers:
        @functools.wraps(func)
        def tuned_call(*args, **kwargs):
            if not torch.compiler.is_compiling() and _entered:
                me = threading.get_ident()
                for ident, mode in reversed(_entered):
                    chosen = mode.choose(func, args, kwargs) if ident == me else None
                    if chosen is not None:
                        return run(chosen, func, args, kwargs)
            return func(*args, **kwargs)
        _wrappers[func] = tuned_call
    return _wrappers[func]


@functools.cache
def _prime() -> None:
    """Build, from the unpatched functions, the registries torch fills lazily from its modules'
    attributes, so that none records a wrapper in place of a function for the rest of the process:
    dynamo's trace rules (else torch.compile could never trace, say, torch.conv2d again: "Dynamo does not
    know how to trace the builtin"), TorchScript's builtin table, torch.overrides' function lists. This
    imports torch._dynamo (~1.2 s, once per process)."""
    try:
        from torch._dynamo import trace_rules
    except ImportError:  # no dynamo in this build: nothing of it to protect
        trace_rules = None
    if trace_rules is not None:
        trace_rules.get_torch_obj_rule_map()
        for value in vars(trace_rules).values():
            if isinstance(value, trace_rules.FunctionIdSet):
                value()
    torch.jit._builtins._get_builtin_table()
    torch.overrides.get_overridable_functions()


def _repatch() -> None:
    """Patch the call points of the ops the entered modes need; restore the others (lock held)."""
    needed = set().union(*(mode.ops for _, mode in _entered))
    if needed:
        _prime()
    for op, points in CALLED_THROUGH.items():
        func = FUNCS[op]
        wrapper = _wrapper(func)
        for owner, attr in points:
            current = getattr(owner, attr)
            if op in needed and current is func:
                setattr(owner, attr, wrapper)
            elif op not in needed and current is wrapper:
                setattr(owner, attr, func)


def enter(mode) -> None:
    """Run the calling thread's tunable calls under ``mode`` (``mode.ops``, ``mode.choose``) too."""
    global _entered
    with _lock:
        _entered = (*_entered, (threading.get_ident(), mode))
        _repatch()


def leave(mode) -> None:
    """Undo the innermost ``enter(mode)``, this thread's if any (a mode not entered: nothing to undo)."""
    global _entered
    with _lock:
        mine = [i for i, (_, m) in enumerate(_entered) if m is mode]
        here = [i for i in mine if _entered[i][0] == threading.get_ident()]
        if mine:
            i = (here or mine)[-1]
            _entered = _entered[:i] + _entered[i + 1:]
            _repatch()


def current():
    """The innermost mode entered on this thread, or None."""
    me = threading.get_ident()
    return next((mode for ident, mode in reversed(_entered) if ident == me), None)
