"""The canonical tables' vocabularies hold for what the readers produce, conform() guards the schema, and
queries over the tables reuse a connection per thread."""
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

import perfsight
from perfsight.core.tables import FLOW_KINDS, SLICE_KINDS, TRACK_KINDS, RunTables, conform, meta_table


@pytest.mark.parametrize("trace", [
    "kineto/hta/df_index_resolver/df_index_resolver.json.gz",
    "kineto/kineto_tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz",
])
def test_readers_use_only_the_documented_kinds(shared_data, trace):
    tables = perfsight.open(shared_data / trace).tables
    assert set(tables.slices["kind"].to_pylist()) <= set(SLICE_KINDS)
    assert set(tables.tracks["kind"].to_pylist()) <= set(TRACK_KINDS)
    assert set(tables.flows["kind"].to_pylist()) <= set(FLOW_KINDS)


def test_conform_adds_missing_nullable_columns_and_refuses_others():
    table = conform("flows", pa.table({"src_id": [1], "dst_id": [2], "kind": ["launch"]}))
    assert table.schema.names == ["src_id", "dst_id", "kind"]
    slices = conform("slices", pa.table({"id": [1], "kind": ["cpu_op"], "name": ["x"], "track_id": [0],
                                         "start_ns": [5], "dur_ns": [1]}))
    assert slices["parent_id"].null_count == 1 and slices.schema.field("track_id").type == pa.int32()
    with pytest.raises(ValueError, match="non-canonical columns"):
        conform("flows", pa.table({"src_id": [1], "dst_id": [2], "kind": ["x"], "extra": [0]}))
    with pytest.raises(ValueError, match="lacks required column 'kind'"):
        conform("flows", pa.table({"src_id": [1], "dst_id": [2]}))


def test_queries_reuse_the_main_threads_connection_and_see_a_table_assigned(monkeypatch):
    """The main thread's queries share one connection (made again when a table is assigned); another
    thread's get one each, never kept (one kept in a daemon thread aborts the interpreter's exit)."""
    opened = []
    connect = RunTables.connect
    monkeypatch.setattr(RunTables, "connect", lambda self: opened.append(threading.get_ident()) or connect(self))
    tables = RunTables(meta=meta_table({"a": "1", "b": "2"}))
    assert tables.sql("SELECT count(*) FROM meta").fetchall() == [(2,)]
    assert tables.sql("SELECT max(key) FROM meta WHERE value = $v", params={"v": "1"}).fetchall() == [("a",)]
    assert opened == [threading.get_ident()]
    tables.meta = meta_table({"c": "3"})          # a new table: a new connection that sees it
    assert tables.sql("SELECT key FROM meta").fetchall() == [("c",)]
    assert len(opened) == 2

    def count(_):
        return threading.get_ident(), tables.sql("SELECT count(*) FROM meta").fetchall()[0][0]

    with ThreadPoolExecutor(2) as pool:           # each query of another thread on a connection of its own
        answers = list(pool.map(count, range(8)))
    assert [n for _, n in answers] == [1] * 8
    assert sorted(opened[2:]) == sorted(thread for thread, _ in answers)
    copied = pickle.loads(pickle.dumps(tables))   # the connections stay behind
    assert copied.sql("SELECT key FROM meta").fetchall() == [("c",)]
