"""The tasks tests/mapreduce/test_engines.py runs on the engines: module-level, so a worker imports them by
name (the local pool's workers get the driver's sys.path; Ray's get the driver's working directory, the
checkout's root, on theirs), and stdlib-only, so they run wherever the engine puts them."""
from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Item:
    n: int
    log: str | None = None   # a file that gets a line each time this item's task starts
    kills: int = 0           # the task kills its own worker process (SIGKILL) on its first ``kills`` starts
    raises: bool = False     # the task raises ValueError
    sleep: float = 0.0       # seconds the task takes
    crowd: str | None = None  # a folder where the task registers while it runs
    greedy: bool = False     # the task kills its worker when another task of its crowd is running (out of memory)


@dataclass(frozen=True)
class Done:
    square: int
    pid: int
    node: str | None         # the Ray node that ran it (None outside Ray)


def square(item: Item) -> Done:
    if item.crowd:
        mine = Path(item.crowd) / str(os.getpid())
        mine.touch()
        try:
            time.sleep(0.01)
            if item.greedy and any(_alive(int(other.name)) for other in Path(item.crowd).iterdir() if other != mine):
                os.kill(os.getpid(), signal.SIGKILL)
            return _square(item)
        finally:
            mine.unlink()
    return _square(item)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _square(item: Item) -> Done:
    if item.log:
        with open(item.log, "a") as log:
            log.write(f"{os.getpid()}\n")
        if len(Path(item.log).read_text().splitlines()) <= item.kills:
            os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(item.sleep)
    if item.raises:
        raise ValueError(f"bad item {item.n}\nsecond line")
    node = sys.modules["ray"].get_runtime_context().get_node_id() if "ray" in sys.modules else None
    return Done(item.n * item.n, os.getpid(), node)


def _die() -> None:
    os._exit(3)


class Unpicklable:
    """An item whose unpickling ends the process that unpickles it: its worker dies before its task starts."""

    def __reduce__(self):
        return (_die, ())
