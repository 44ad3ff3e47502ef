"""A class attribute replaced by a wrapper of it for a while, undone in any order: ``Patched(owner, name, wrap)``.

perfsight patches a few of torch's methods while it needs them (the DataLoader's ``__iter__`` and its
iterators' ``__next__`` while tuning or applying a bank). Patches of one attribute stack up, and may be undone
in any order: ``remove()`` turns a wrapper into a pass-through (``active`` False) and takes off every
inactive wrapper from the top of its stack, putting back what each replaced - so once all are removed the
attribute is the original again. A wrapper installed by something else on top stops the unwinding (it holds
a reference to ours); ours then stays in the chain, passing every call through.
"""
from __future__ import annotations

from collections.abc import Callable

_STACKS: dict[tuple[type, str], list[Patched]] = {}


class Patched:
    """``owner.name`` replaced by ``wrap(original)`` until ``remove()`` (module docstring); the wrapper should
    call ``original`` alone while ``active`` is False."""

    def __init__(self, owner: type, name: str, wrap: Callable[[Callable], Callable]):
        self.owner, self.name, self.active = owner, name, True
        self.original = getattr(owner, name)
        self.wrapper = wrap(self.original)
        setattr(owner, name, self.wrapper)
        _STACKS.setdefault((owner, name), []).append(self)

    def remove(self) -> None:
        self.active = False
        stack = _STACKS.get((self.owner, self.name), [])
        while stack and not stack[-1].active and getattr(self.owner, self.name) is stack[-1].wrapper:
            setattr(self.owner, self.name, stack.pop().original)
