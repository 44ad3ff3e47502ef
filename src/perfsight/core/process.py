"""How perfsight's own trace-reading processes (``perfsight analyse``, ``export``, ``insight``) set up Arrow.

Two process-wide settings that a library must not impose on a user's process, so only the CLI calls
``prepare``:

* Arrow's system allocator: the default pool (mimalloc) keeps freed memory; the system allocator peaks
  ~60 MiB lower on a 54 MB trace for ~10% more time (bench/RESULTS.md). Set before pyarrow is imported.
* pandas withheld from Arrow's first look: pyarrow imports pandas, when it is installed, the first time
  it builds an array (to check for pandas objects); that costs a reader that never uses pandas ~0.1-0.3 s
  and ~37 MiB. Arrow is shown a missing pandas once; its ``to_pandas`` still imports pandas on demand.

It also owns how many cores this process may use (``usable_cores``: the tuner's thread counts, the cluster
map's default local pool).
"""
from __future__ import annotations

import os
import sys


class _PandasWithheld:
    """A meta-path finder that makes ``import pandas`` fail while it is installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            raise ImportError("pandas withheld from pyarrow's first check (perfsight.core.process)")
        return None


def prepare() -> None:
    """Set this process up for reading traces (call before anything imports pyarrow)."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    import pyarrow as pa

    if "pandas" in sys.modules:  # already paid for: let Arrow use it
        return
    finder = _PandasWithheld()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])  # Arrow's one non-raising pandas check happens here, and is remembered
    finally:
        sys.meta_path.remove(finder)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or ``taskset`` narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
