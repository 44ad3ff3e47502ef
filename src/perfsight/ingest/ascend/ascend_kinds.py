"""Ascend's vocabularies mapped to perfsight's: task types, timeline processes, CANN API levels and HCCL
names, for every Ascend reader (torch_npu text and .db, msprof, MindSpore).

Owns:

* ``task_kind(task_type, name)`` (``task_kinds`` for columns): the canonical slice ``kind`` of a device
  task from its task type (the trace's ``Task Type``, kernel_details' ``Accelerator Core``, the .db's
  ``taskType``): compute task types (AI_CORE, AI_VECTOR_CORE, AI_CPU, MIX_AIC, MIX_AIV, DSA...) are
  ``kernel``; HCCL is ``comm``; DMA copies are ``memcpy``; the scheduler's event records and waits are
  ``sync``; the data moves and notifies inside an HCCL operator (``SDMA``, ``Notify Wait``,
  ``Reduce_Inline``...), profiling markers and the runtime's own tasks (``TASK_TIMEOUT_SET``) are
  ``other``, because the HCCL operator that contains them is the communication perfsight counts and the
  others are no operator. A task type not known here is ``kernel`` (older torch_npu
  writes ``Other`` for compute tasks), unless its name says it is a copy. A compute or unknown task named
  as an HCCL operator (``hcom_...``: communication HCCL scheduled on the AI CPU) is ``comm``. The
  ``task_type`` column keeps Ascend's own text.
* ``process_role(name)``: what a timeline process of torch_npu/msprof holds (``host``, ``runtime``,
  ``device``, ``communication``, ``overlap``) by its ``process_name``.
* ``api_kind(level, name)`` (``api_kinds`` for columns): the kind of a CANN API call (``runtime``;
  ``driver`` for the runtime level under AscendCL; ``sync`` for synchronisations).
* ``collective_name(op_name)`` and ``torch_dtype(hccl_dtype)``: an HCCL operator's collective and data type
  in PyTorch's words (``hcom_allReduce__586_0_1`` -> ``allreduce``, ``FP32`` -> ``float32``).

Every mapping compares normalised text: upper case, runs of spaces and underscores as one ``_``.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.ingest.common.columns import dictionary


def normalised(text: str | None) -> str:
    """``Notify Wait``, ``Notify_Wait``, ``notify wait`` -> ``NOTIFY_WAIT``."""
    return re.sub(r"[\s_]+", "_", (text or "").strip()).upper()


COMPUTE = {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "AICPU", "AIV", "MIX_AIC", "MIX_AIV", "DSA_SQE", "DSA",
           "FFTS_PLUS", "KERNEL_AICORE", "KERNEL_AIVEC", "KERNEL_AICPU", "KERNEL_MIX_AIC", "KERNEL_MIX_AIV",
           "AI_CORE_SQE", "AI_CPU_SQE", "AIV_SQE"}
COMMUNICATION = {"HCCL", "COMMUNICATION", "HCCL_AICPU", "COMMUNICATION_OP"}
MEMCPY = {"PCIE_DMA_SQE", "SDMA_SQE", "MEMCPY_ASYNC", "MEMCPY", "PCIE_DMA", "ASYNC_MEMCPY"}
MEMSET = {"MEMSET", "MEMSET_ASYNC"}
SYNC = {"EVENT_RECORD_SQE", "EVENT_WAIT_SQE", "NOTIFY_RECORD_SQE", "NOTIFY_WAIT_SQE", "EVENT_RECORD",
        "EVENT_WAIT", "STREAM_WAIT_EVENT", "EVENT_RESET"}
#: tasks that are parts of an HCCL operator (on its stream and in its plane rows): counted through the operator
HCCL_PARTS = {"SDMA", "RDMA", "NOTIFY_WAIT", "NOTIFY_RECORD", "WRITE_VALUE", "REDUCE_INLINE", "REDUCE_TBE",
              "INLINE_REDUCE", "REDUCE_ASYNC_V2", "LOCAL", "RDMA_SEND", "VOLATILE_SEND"}
MARKERS = {"PLACE_HOLDER_SQE", "PROFILING_ENABLE", "PROFILING_DISABLE", "MODEL_MAINTAINCE", "MODEL_EXECUTE",
           "MODEL_END_GRAPH", "LABEL_SET", "LABEL_SWITCH", "LABEL_GOTO", "STARS_COMMON", "CAPTURE_RECORD",
           "CAPTURE_WAIT"}
#: the runtime's own tasks on a stream (it sets the stream's timeout): no operator and no computation, though an
#: unknown task type would be taken for one (msprof's op_statistic then lost half its ratio to it)
RUNTIME_TASKS = {"TASK_TIMEOUT_SET"}
_KIND_OF_TYPE = {**{t: "kernel" for t in COMPUTE}, **{t: "comm" for t in COMMUNICATION},
                 **{t: "memcpy" for t in MEMCPY}, **{t: "memset" for t in MEMSET}, **{t: "sync" for t in SYNC},
                 **{t: "other" for t in HCCL_PARTS | MARKERS | RUNTIME_TASKS}}


#: the name prefix of an HCCL operator (``hcom_allReduce__586_0_1``), normalised
HCCL_NAME_PREFIX = "HCOM_"


def task_kind(task_type: str | None, name: str | None = None) -> str:
    """The slice kind of a device task (module docstring)."""
    kind = _KIND_OF_TYPE.get(normalised(task_type))
    label = normalised(name)
    if kind in (None, "kernel") and label.startswith(HCCL_NAME_PREFIX):
        return "comm"
    if kind is not None:
        return kind
    return "memcpy" if label.startswith("MEMCPY") else "memset" if label.startswith("MEMSET") else "kernel"


def task_kinds(task_types: pa.Array | pa.ChunkedArray, names: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``task_kind`` of every (task type, name) pair, computed once per distinct pair."""
    return _per_pair(task_kind, task_types, names)


def _per_pair(function, first: pa.Array | pa.ChunkedArray, second: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``function(a, b)`` (a str) for every pair of the two text columns, called once per distinct pair."""
    a, b = dictionary(pc.fill_null(first, "")), dictionary(pc.fill_null(second, ""))
    pairs = a.indices.to_numpy().astype(np.int64) * max(len(b.dictionary), 1) + b.indices.to_numpy()
    distinct, inverse = np.unique(pairs, return_inverse=True)
    a_values, b_values = a.dictionary.to_pylist(), b.dictionary.to_pylist()
    results = [function(a_values[pair // len(b_values)], b_values[pair % len(b_values)]) for pair in distinct.tolist()]
    return pa.array(results, pa.string()).take(pa.array(inverse.ravel()))


#: timeline process names (torch_npu trace_view.json, msprof msprof_*.json) -> what their rows hold
PROCESS_ROLES = {
    "PYTHON": "host", "PYTORCH": "host", "MINDSPORE": "host",
    "CANN": "runtime", "ASCENDCL": "runtime", "RUNTIME": "runtime", "GE": "runtime",
    "ASCEND_HARDWARE": "device", "TASK_SCHEDULER": "device", "AI_CPU": "device",
    "HCCL": "communication",
    "OVERLAP_ANALYSIS": "overlap",
}


def process_role(name: str | None) -> str | None:
    """``host``, ``runtime``, ``device``, ``communication`` or ``overlap`` for a timeline process name;
    None for processes of counters or unknown rows."""
    return PROCESS_ROLES.get(normalised(name))


#: the prefix msprof's and torch_npu's timelines give a CANN API call's name (``AscendCL@aclnnMatmul``) -> the
#: Level their api_statistic writes for it (``acl``, and the bare name ``aclnnMatmul``)
API_LEVEL_PREFIXES = {"AscendCL": "acl", "Runtime": "runtime", "Node": "node", "Hccl": "hccl", "Model": "model"}


def api_kind(level: str | None, name: str | None) -> str:
    """Kind of a CANN API call: ``sync`` for a synchronisation, ``driver`` for the runtime level (rt*,
    under AscendCL, as CUDA's driver API is under its runtime API), else ``runtime``."""
    if "SYNCHRONIZ" in normalised(name):
        return "sync"
    return "driver" if normalised(level) == "RUNTIME" else "runtime"


def api_kinds(levels: pa.Array | pa.ChunkedArray, names: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``api_kind`` of every (level, name) pair, computed once per distinct pair."""
    return _per_pair(api_kind, levels, names)


#: the instance suffix of an HCCL operator's name (``hcom_allReduce__586_0_1`` -> ``hcom_allReduce_``, its
#: OP Type), a regular expression for Python and DuckDB
HCCL_OP_SUFFIX = r"(_[0-9]+)+$"

#: HCCL operator name stems (``hcom_<stem>_``) -> PyTorch's collective names
_COLLECTIVES = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reduce_scatter",
                "BROADCAST": "broadcast", "SEND": "send", "RECEIVE": "recv", "RECV": "recv",
                "ALLTOALL": "all_to_all", "ALLTOALLV": "all_to_all", "ALLTOALLVC": "all_to_all",
                "REDUCE": "reduce", "GATHER": "gather", "SCATTER": "scatter", "BATCHSENDRECV": "batch_send_recv"}
_HCOM_NAME = re.compile(r"^(?:hcom_)?([A-Za-z]+)", re.IGNORECASE)


def collective_name(op_name: str) -> str:
    """``hcom_allReduce__586_0_1`` -> ``allreduce`` (PyTorch's name when known, else the stem lower-cased)."""
    found = _HCOM_NAME.match(op_name or "")
    stem = found.group(1).upper() if found else normalised(op_name)
    return _COLLECTIVES.get(stem, stem.lower())


_DTYPES = {"FP32": "float32", "FLOAT": "float32", "FLOAT32": "float32", "FP16": "float16", "FLOAT16": "float16",
           "BFP16": "bfloat16", "BF16": "bfloat16", "BFLOAT16": "bfloat16", "FP64": "float64", "DOUBLE": "float64",
           "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "UINT8": "uint8",
           "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64", "BOOL": "bool"}


def torch_dtype(hccl_dtype: str | None) -> str | None:
    """HCCL's data type text (``FP32``, ``BFP16``, ``INT8``) -> PyTorch's name; None when unknown."""
    return _DTYPES.get(normalised(hccl_dtype))


def collective_args(op_name: str, hccl_dtype: str | None, count, group_name: str | None,
                    group_desc: str | None, ranks: list[int], local: bool = False) -> dict:
    """The collective facts analysis/cluster.py reads from a communication operator's ``args``, under
    PyTorch's key names (as a Kineto trace has them), and ``Process Group Ranks Local`` (true) when
    ``ranks`` are group-local positions no mapping made global; unknown values are left out."""
    count = count if type(count) is int else None
    facts = {"Collective name": collective_name(op_name), "dtype": torch_dtype(hccl_dtype),
             "In msg nelems": count, "Out msg nelems": count, "Group size": len(ranks) or None,
             "Process Group Name": group_name, "Process Group Desc": group_desc,
             "Process Group Ranks": json.dumps(ranks) if ranks else None,
             "Process Group Ranks Local": True if ranks and local else None}
    return {key: value for key, value in facts.items() if value is not None}
