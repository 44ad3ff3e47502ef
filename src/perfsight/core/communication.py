"""Which work is communication: the one rule the readers, the analyses and both timelines apply.

* A slice is communication when its ``kind`` is ``comm`` (``COMM_KIND``), and only then. The readers set
  it: Ascend's readers from the task type (HCCL: ``ingest/ascend/ascend_kinds.COMMUNICATION``), the Kineto
  classification (``ingest/common/kinds.py``, also torch_npu's host side) from the event: a category
  naming communication (``is_comm_category``), a device kernel that ``COMM_KERNEL_PATTERNS`` names (any
  case: ``is_comm_kernel``): a collective library's (NCCL, RCCL, MSCCL, HCCL as a Kineto trace names it), a
  kernel named after a collective (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, with or
  without the underscores: torch's symmetric-memory ``multimem_all_reduce_kernel``, TensorRT-LLM's
  ``oneShotAllReduceKernel``, an inference engine's custom all-reduce), vLLM's and SGLang's custom all-reduce
  (``cross_device_reduce_1stage``), torch's symmetric-memory namespace, DeepEP's and kernels named as DeepEP
  names its expert-parallel all-to-all (``dispatch``, ``combine``, ``notify_dispatch``), NVSHMEM's; a host operator or
  range named after torch.distributed (``c10d::...``), after a backend of ``BACKENDS`` (``nccl:all_reduce``,
  ``gloo:broadcast``...) or PyTorch's ``record_param_comms`` (``is_comm_host_name``). After the readers,
  what is communication is ``kind`` alone (the breakdowns' COMMUNICATION kernel type, the collectives, the
  export's Communication layer, the web timeline); names are read again only to tell communication slices
  apart (the collectives' backend ranges, ``BACKEND_RANGE``).
* Counted once: the breakdowns count a rank's device communication tasks as its communication time, and
  its host ``comm`` slices (torch.distributed calls, the backends' host ranges) only on a rank without
  device communication tasks (a CPU job on gloo, or a GPU job whose collectives run on gloo), where the
  host is what communicates; elsewhere the host slices only enqueue the device's work and are host
  operators. The collectives take each rank's first source (``analysis/collectives.py``).
* A backend of ``HOST_EXECUTED_BACKENDS`` runs a collective on the host thread whose range records it
  (gloo's worker threads), so that range's time is the collective's; NCCL's host range only enqueues it.
* A stream is a communication stream when more than half of its device tasks are communication slices
  (``is_comm_stream``): the web timeline groups it under "communication".
* The figures a profiler reported for an operator (Ascend's per-operator communication time and bandwidth)
  travel in the operator slice's ``args``, in communication.json's form whichever file they came from:
  ``REPORTED_TIME`` and ``REPORTED_BANDWIDTH`` hold its two objects, ``REPORTED_FROM`` names the file
  (``communication.json``, ``analysis.db``). The readers put them there; analysis/collectives.py takes them
  as reported.

Names no rule here covers are compute: a kernel that only reduces (``reduce_kernel``, CUB's
``DeviceReduceKernel``), ``mpi:`` or ``ucc:`` host ranges (whose backends' timing perfsight has not seen).
"""
from __future__ import annotations

import re

#: slices.kind of communication
COMM_KIND = "comm"

#: torch.distributed backends whose host ranges the Kineto trace names ``<backend>:<collective>``
BACKENDS = ("nccl", "rccl", "gloo")

#: backends whose host range (``gloo:all_reduce``) spans the collective's execution on that thread
HOST_EXECUTED_BACKENDS = ("gloo",)

#: the ``args`` keys of an operator's reported figures (communication.json's objects) and of their file
REPORTED_TIME, REPORTED_BANDWIDTH = "Communication Time Info", "Communication Bandwidth Info"
REPORTED_FROM = "Communication Info From"

#: a regular expression (Python and DuckDB) matching a backend's host range, the collective after the colon
BACKEND_RANGE = rf"^({'|'.join(BACKENDS)}):"

_HOST_NAME = re.compile(rf"(c10d::|{'|'.join(f'{backend}:' for backend in BACKENDS)})|record_param_comms$")
#: what names a communication kernel (searched in its whole name, any case; ``is_comm_kernel``)
COMM_KERNEL_PATTERNS = (
    r"^(void\s+)?(nccl|rccl|msccl|hccl|hcom)",       # the collective libraries' kernels: ncclDevKernel_..., ...
    r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",   # kernels named after the collective they run
    r"cross_device_reduce",                          # vLLM's and SGLang's custom all-reduce (1stage, 2stage)
    r"c10d::symmetric_memory::",                     # torch's symmetric memory (NVLS/multimem exchanges, barriers)
    r"deep_ep::",                                    # DeepEP's expert-parallel dispatch and combine
    # expert-parallel all-to-all kernels named as DeepEP names them, in any namespace (its forks and look-alikes):
    # dispatch, combine, notify_dispatch, cached_notify_combine ... as the function's own name
    r"(?:^|::|\s)(?:cached_)?(?:notify_)?(?:dispatch|combine)(?:_kernel)?\s*(?:<|\(|$)",
    r"nvshmem",                                      # NVSHMEM's one-sided communication kernels
)
_KERNEL_NAME = re.compile("|".join(f"(?:{pattern})" for pattern in COMM_KERNEL_PATTERNS), re.IGNORECASE)


def is_comm_category(category: str) -> bool:
    """Whether a Kineto category (lower-cased) says its events are communication."""
    return "comm" in category


def is_comm_kernel(name: str) -> bool:
    """Whether a device kernel is communication (``COMM_KERNEL_PATTERNS``)."""
    return _KERNEL_NAME.search(name) is not None


def is_comm_host_name(name: str) -> bool:
    """Whether a host operator or range is communication: ``c10d::...``, ``<backend>:...`` or
    ``record_param_comms``."""
    return _HOST_NAME.match(name) is not None


def is_comm_stream(comm_tasks, tasks):
    """Whether a stream with ``tasks`` device tasks, ``comm_tasks`` of them communication, is a communication
    stream (numbers or numpy arrays of them)."""
    return 2 * comm_tasks > tasks
