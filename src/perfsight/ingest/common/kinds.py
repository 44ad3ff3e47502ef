"""What a Kineto complete event is: its slice kind, device task type, step number and whether it runs on a device.

Owns the mapping from a (category, name) pair to those facts, for the current format (``cpu_op``,
``kernel``, ``cuda_runtime``, ...), the 2021 format (``Operator``, ``Kernel``, ``Runtime``, ...), the legacy
autograd profiler's export (no category: its process names it, ``LEGACY_PROCESS_CATEGORIES``) and AMD
ROCm traces, and its vectorised application: classification runs once per distinct pair, not per event.
Which events are communication is core/communication.py's rule.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.communication import COMM_KIND, is_comm_category, is_comm_host_name, is_comm_kernel
from perfsight.core.tables import fits
from perfsight.ingest.common.columns import dictionary

#: category (lower-cased) -> slice kind, before the name-based refinements below
CATEGORY_KINDS = {
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "user_annotation": "annotation",
    "python_function": "python",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "runtime", "runtime": "runtime", "xpu_runtime": "runtime", "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "cuda_driver": "driver", "privateuse1_driver": "driver",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_sync": "sync",
}

#: the process of the legacy autograd profiler's export_chrome_trace (PyTorch <= 1.8: a bare list of events
#: without "cat", ``"pid": "CPU functions"``) -> the category its events are
LEGACY_PROCESS_CATEGORIES = {"CPU functions": "cpu_op"}

#: categories whose events are drawn on a device stream (the event's pid is the device index)
DEVICE_CATEGORIES = frozenset({
    "kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "gpu_user_annotation", "cuda_sync",
    "cuda_profiler_range",  # kernels replayed under the CUPTI range profiler: kept as "other", not timed work
})

TASK_TYPES = {"kernel": "KERNEL", "comm": "COMM", "memcpy": "MEMCPY", "memset": "MEMSET"}

STEP_NAME = re.compile(r"ProfilerStep#(\d+)")
DATALOADER_NAME = re.compile(r"enumerate\(DataLoader\)|## DataLoader")
RENAMEABLE_HOST_KINDS = ("cpu_op", "annotation")


@dataclass(frozen=True)
class Classification:
    kind: str
    task_type: str | None
    step: int | None  # N of ProfilerStep#N
    on_device: bool


#: (category, name) pairs whose classification a process keeps: a worker reading a batch of ranks meets the
#: same kernel and operator names in every rank (matching a long kernel name took ~4% of a GPU rank's read)
CLASSIFIED_PAIRS = 65536


@functools.lru_cache(maxsize=CLASSIFIED_PAIRS)
def classify(category: str | None, name: str) -> Classification:
    """Kind, task type, step number and device-ness of one complete event."""
    category = (category or "").lower()
    on_device = category in DEVICE_CATEGORIES
    kind = CATEGORY_KINDS.get(category, "other")
    step = None
    if is_comm_category(category) or (on_device and kind == "kernel" and is_comm_kernel(name)):
        kind = COMM_KIND
    elif kind in RENAMEABLE_HOST_KINDS:
        kind, step = _host_kind(kind, name)
    elif kind == "runtime" and "Synchronize" in name:
        kind = "sync"
    task_type = TASK_TYPES.get(kind) if on_device else None
    return Classification(kind, task_type, step, on_device)


def _host_kind(kind: str, name: str) -> tuple[str, int | None]:
    step = STEP_NAME.fullmatch(name)
    if step and fits(int(step.group(1)), 32):  # a larger "ProfilerStep#N" is an annotation like any other
        return "step", int(step.group(1))
    if DATALOADER_NAME.match(name):
        return "dataloader", None
    if is_comm_host_name(name):
        return COMM_KIND, None
    return kind, None


def with_legacy_categories(categories: pa.ChunkedArray, pids: pa.ChunkedArray) -> pa.ChunkedArray:
    """``categories`` with an event that has none taking its process's (``LEGACY_PROCESS_CATEGORIES``); a
    trace whose events all have one (every current trace) is returned as it is, its pids never compared."""
    missing = pc.fill_null(pc.equal(categories, ""), True)
    if not pc.any(missing).as_py():
        return categories
    for process, category in LEGACY_PROCESS_CATEGORIES.items():
        categories = pc.if_else(pc.and_(missing, pc.equal(pids.cast(pa.string()), process)), category, categories)
    return categories


def classify_columns(categories: pa.ChunkedArray, names: pa.ChunkedArray) -> dict[str, pa.Array]:
    """``kind``, ``task_type``, ``name_step`` and ``on_device`` columns for the given events."""
    category_codes = dictionary(pc.fill_null(categories, ""))
    name_codes = dictionary(names)
    pair_keys = (category_codes.indices.to_numpy().astype(np.int64) * len(name_codes.dictionary)
                 + name_codes.indices.to_numpy())
    distinct_keys, inverse = np.unique(pair_keys, return_inverse=True)
    category_values = category_codes.dictionary.to_pylist()
    name_values = name_codes.dictionary.to_pylist()
    distinct = [classify(category_values[key // len(name_values)], name_values[key % len(name_values)])
                for key in distinct_keys.tolist()]
    indices = pa.array(inverse.ravel())
    return {
        "kind": pa.array([c.kind for c in distinct], pa.string()).take(indices),
        "task_type": pa.array([c.task_type for c in distinct], pa.string()).take(indices),
        "name_step": pa.array([c.step for c in distinct], pa.int32()).take(indices),
        "on_device": pa.array([c.on_device for c in distinct], pa.bool_()).take(indices),
    }
