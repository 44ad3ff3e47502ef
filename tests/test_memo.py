"""The per-run result memo (core.memo): equivalent calls share one entry, the kept results stay within the
capacity (least recently used out, a too large result not kept), one computation per key however many
threads ask, and a run's tables own it (new tables, or a table assigned, start empty)."""
from __future__ import annotations

import dataclasses
import pickle
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pytest

import perfsight
from perfsight.analysis import ops
from perfsight.core.memo import SIZE_SAMPLE, Memo, computed, memo_key, result_bytes
from perfsight.core.tables import RunTables

CALLS: list[tuple] = []


def analysis(tables, *, kinds=None, level: int = 1):
    """A stand-in analysis: records each computation, returns its arguments."""
    CALLS.append((kinds, level))
    return (kinds, level)


def sized(tables, nbytes: int):
    """A result of ``nbytes`` bytes."""
    CALLS.append(nbytes)
    return np.zeros(nbytes, dtype=np.uint8)


@pytest.fixture(autouse=True)
def no_calls():
    CALLS.clear()


def test_calls_with_the_defaults_applied_share_one_entry():
    tables = RunTables()
    first = computed(analysis, tables)
    assert computed(analysis, tables, kinds=None) is first and computed(analysis, tables, level=1) is first
    assert computed(analysis, tables, kinds=None, level=1) is first
    assert computed(analysis, tables, kinds=["a", "b"]) is computed(analysis, tables, kinds=("a", "b"))
    assert computed(analysis, tables, level=True) == (None, True)         # not the entry of level=1
    assert CALLS == [(None, 1), (["a", "b"], 1), (None, True)] and len(tables.memo) == 3


def test_the_key_is_the_function_name_and_its_bound_arguments():
    assert memo_key(ops.op_instances, (), {}) == memo_key(ops.op_instances, (), {"kinds": None})
    assert memo_key(ops.op_statistic, (), {"by": ["op_type", "device"]}) == memo_key(
        ops.op_statistic, (), {"by": ("op_type", "device"), "kinds": None})
    assert memo_key(ops.op_statistic, (), {"by": "name"}) != memo_key(ops.op_statistic, (), {})
    with pytest.raises(TypeError, match=r"op_instances: argument kinds \(a ndarray\) cannot be part of a memo key"):
        memo_key(ops.op_instances, (), {"kinds": np.array(["cpu_op"])})
    with pytest.raises(TypeError, match="unexpected keyword argument 'kind'"):
        memo_key(ops.op_instances, (), {"kind": "cpu_op"})


def test_a_run_computes_op_instances_once_whichever_way_it_is_asked(shared_data):
    run = perfsight.open(shared_data / "kineto/hta/trace_filter/sampled_rank-0.json.gz")
    instances = run.op_instances()
    kept = len(run.memo)                             # op_instances and what it asked the memo for
    assert run.op_instances(kinds=None) is instances and computed(ops.op_instances, run.tables) is instances
    assert len(run.memo) == kept
    run.op_statistic()                               # its executions are op_instances(): no second computation
    assert len(run.memo) == kept + 1


def test_least_recently_used_results_go_first_when_the_capacity_is_reached():
    tables = RunTables()
    tables.memo = Memo(capacity_bytes=1000)
    a = computed(sized, tables, 400)
    computed(sized, tables, 401)
    assert computed(sized, tables, 400) is a                       # a is now the most recently used
    computed(sized, tables, 402)                                   # 1203 bytes: 401 goes
    assert len(tables.memo) == 2 and tables.memo.kept_bytes == 802
    assert computed(sized, tables, 400) is a and computed(sized, tables, 402) is not None
    computed(sized, tables, 401)                                   # computed again, and 400 goes
    assert CALLS == [400, 401, 402, 401] and tables.memo.kept_bytes == 803


def test_a_result_larger_than_the_capacity_is_returned_not_kept():
    tables = RunTables()
    tables.memo = Memo(capacity_bytes=1000)
    kept = computed(sized, tables, 10)
    assert computed(sized, tables, 1001).nbytes == 1001 and computed(sized, tables, 1001).nbytes == 1001
    assert CALLS == [10, 1001, 1001] and len(tables.memo) == 1 and computed(sized, tables, 10) is kept


def test_the_default_capacity_is_a_share_of_the_memory():
    import psutil

    from perfsight.core.memo import MEMO_MEMORY_SHARE

    assert Memo().capacity_bytes == int(psutil.virtual_memory().total * MEMO_MEMORY_SHARE)


BLOCKED = threading.Event()


def blocked(tables):
    """An analysis that holds its computation until BLOCKED is set."""
    CALLS.append(threading.get_ident())
    BLOCKED.wait(120)
    return object()


def failing(tables):
    CALLS.append(threading.get_ident())
    BLOCKED.wait(120)
    raise ValueError("damaged")


@pytest.mark.parametrize("function", [blocked, failing])
def test_threads_asking_for_the_same_key_wait_for_one_computation(function, monkeypatch):
    from perfsight.core import memo

    tables, threads = RunTables(), 8
    BLOCKED.clear()
    started = threading.Barrier(threads + 1)
    waiting = []

    class Waited(memo.Future):                       # the memo's computation under way, its waiters counted
        def result(self, timeout=None):
            waiting.append(threading.get_ident())
            return super().result(timeout)
    monkeypatch.setattr(memo, "Future", Waited)

    def ask():
        started.wait()
        try:
            return computed(function, tables)
        except ValueError as error:
            return error

    with ThreadPoolExecutor(max_workers=threads) as pool:
        answers = [pool.submit(ask) for _ in range(threads)]
        started.wait()
        deadline = time.monotonic() + 60
        while len(waiting) < threads - 1:            # one thread computes, every other one waits for it
            assert time.monotonic() < deadline, (CALLS, waiting)
            time.sleep(0.01)
        BLOCKED.set()
        results = [answer.result() for answer in answers]
    assert len(CALLS) == 1 and len(waiting) == threads - 1 and all(r is results[0] for r in results)
    if function is failing:                          # all got the one error; nothing kept: the next call computes
        assert isinstance(results[0], ValueError) and len(tables.memo) == 0
        with pytest.raises(ValueError, match="damaged"):
            computed(failing, tables)
        assert len(CALLS) == 2


def test_new_tables_and_a_table_assigned_start_with_an_empty_memo():
    tables = RunTables()
    computed(analysis, tables)
    assert len(tables.with_meta({"fp_point": "aten::mm"}).memo) == 0
    assert len(dataclasses.replace(tables).memo) == 0 and len(pickle.loads(pickle.dumps(tables)).memo) == 0
    assert len(tables.memo) == 1 and tables == dataclasses.replace(tables)   # the memo is not compared
    tables.slices = tables.slices.slice(0, 0)
    assert len(tables.memo) == 0
    computed(analysis, tables)
    assert CALLS == [(None, 1), (None, 1)]


def test_a_computation_under_way_when_the_tables_change_is_not_kept():
    tables = RunTables()
    BLOCKED.clear()
    with ThreadPoolExecutor(max_workers=1) as pool:
        answer = pool.submit(computed, blocked, tables)
        while not CALLS:
            time.sleep(0.01)
        tables.meta = tables.meta                       # assigning a table empties the memo
        BLOCKED.set()
        answer.result()
    assert len(tables.memo) == 0


def test_result_bytes_counts_tables_arrays_containers_and_objects_once():
    table = pa.table({"x": pa.array(range(100), pa.int64())})
    assert result_bytes(table) == 800 and result_bytes(np.zeros(10)) == 80

    class Index:
        def __init__(self, tables):
            self.tables, self.a, self.b, self.same = tables, np.zeros(1000, np.uint8), {"t": table}, None

    index = Index(RunTables())
    index.same = index.a
    assert 1800 <= result_bytes(index) < 1800 + 2000            # the run's tables and the repeated array: nothing
    assert result_bytes({"profiled": table, "rows": [1, 2]}) > 800


def test_result_bytes_estimates_a_long_container_from_a_sample_of_its_items():
    """A critical-path graph keeps millions of numbers in lists: SIZE_SAMPLE of them, evenly spaced, stand for
    all. Half the items are floats (24 bytes each) and half 4 KiB arrays, alternating, so the sample's mix is
    the container's."""
    items = [np.zeros(4096, np.uint8) if i % 2 else float(i) for i in range(100_000)]
    exact = sys.getsizeof(items) + 50_000 * (sys.getsizeof(0.0) + 4096)
    assert result_bytes(items) == pytest.approx(exact, rel=0.01)
    keyed = {i: item for i, item in enumerate(items)}
    assert result_bytes(keyed) == pytest.approx(sys.getsizeof(keyed) + exact - sys.getsizeof(items)
                                                + sum(map(sys.getsizeof, range(100_000))), rel=0.01)
    assert result_bytes(items[:SIZE_SAMPLE]) == sys.getsizeof(items[:SIZE_SAMPLE]) + SIZE_SAMPLE // 2 * (24 + 4096)


def itself(tables, depth: int = 0):
    return computed(itself, tables, depth)


def test_an_analysis_asking_for_its_own_result_is_an_error_not_a_hang():
    tables = RunTables()
    with pytest.raises(RuntimeError, match=r"\.itself asks for its own result"):
        computed(itself, tables)
    assert len(tables.memo) == 0 and computed(analysis, tables) == (None, 1)
