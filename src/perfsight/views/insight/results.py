"""Analysis results as the page routes serve them (every one through the run's memo, ``core.memo.computed``:
computed once per open run and arguments), times of day relative to the run's start, and checked query
parameters.

* ``executions(loaded, view)``: the operator executions the operator pages list (``ops.op_instances``):
  the ``device`` tasks or the ``host`` framework operators (``views(loaded)`` says which the run has).
* ``relative(loaded, table)``: a result with its times of day (columns named ``start_ns``, ``end_ns``,
  ``*_start_ns``, ``*_end_ns``, ``*ts_ns``) made relative to ``summary.run_start_ns``: ns since the
  epoch need 61 bits and a JavaScript number holds 53, so no absolute time goes to a page (durations do).
* ``integer`` / ``bounded`` / ``choice``: query parameters checked with 400 answers that name the
  parameter and what is allowed (integers never beyond the int64 the tables hold).
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import HTTPException

from perfsight.analysis.ops import has_device_tasks, op_instances
from perfsight.analysis.summary import run_start_ns
from perfsight.core.memo import computed
from perfsight.views.insight.library import LoadedRun

#: the operator views: device tasks (kernels, communication, memory copies) or host framework operators
VIEWS = ("device", "host")
#: the largest int32 (ranks) and int64 (times, ids, offsets) the tables hold: the bounds of integer parameters
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
#: characters of a rejected parameter value quoted back in the error
SHOWN_CHARACTERS = 40
_TIME_SUFFIXES = ("start_ns", "end_ns", "ts_ns")


def views(loaded: LoadedRun) -> list[str]:
    """The operator views the run has: ``device`` first when it has device tasks, and ``host``."""
    return list(VIEWS) if computed(has_device_tasks, loaded.tables) else ["host"]


def view_param(loaded: LoadedRun, view: str | None) -> str:
    """The ``view`` query parameter, checked against the run's views; the first one when absent."""
    return choice("view", view, views(loaded)) if view else views(loaded)[0]


def view_kinds(view: str) -> tuple[str, ...] | None:
    """The ``kinds`` argument of the operator analyses for a view: None (the device tasks, on a run that
    has them) or host ``cpu_op`` slices."""
    return None if view == "device" else ("cpu_op",)


def executions(loaded: LoadedRun, view: str) -> pa.Table:
    """``op_instances`` of the view."""
    return computed(op_instances, loaded.tables, kinds=view_kinds(view))


def relative(loaded: LoadedRun, table: pa.Table) -> pa.Table:
    """``table`` with its time-of-day columns minus the run's start (module docstring)."""
    origin = computed(run_start_ns, loaded.tables)
    for i, name in enumerate(table.schema.names):
        if name.endswith(_TIME_SUFFIXES) and pa.types.is_integer(table.schema.field(i).type):
            table = table.set_column(i, name, pc.subtract(table.column(i), pa.scalar(origin, pa.int64())))
    return table


def integer(name: str, value: str | None, default: int | None, low: int, high: int = INT64_MAX) -> int | None:
    """An integer query parameter in ``[low, high]`` (``default`` when absent)."""
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise HTTPException(400, f"{name}={_quoted(value)!r}: expected an integer from {low} to {high}") from None
    return bounded(name, number, low, high)


def bounded(name: str, number: int, low: int, high: int = INT64_MAX) -> int:
    """``number`` (the query parameter ``name``) if it is in ``[low, high]``, else a 400 answer saying so:
    the tables' integers are int64 (ranks int32), so nothing larger reaches them."""
    if not low <= number <= high:
        raise HTTPException(400, f"{name}={_quoted(str(number))}: expected an integer from {low} to {high}")
    return number


def _quoted(text: str) -> str:
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "…"


def choice(name: str, value: str | None, allowed, default: str | None = None) -> str:
    """A query parameter that must be one of ``allowed``."""
    if value is None or value == "":
        if default is None:
            raise HTTPException(400, f"{name} is required: one of {', '.join(allowed)}")
        return default
    if value not in allowed:
        raise HTTPException(400, f"{name}={value!r}: expected one of {', '.join(allowed)}")
    return value
