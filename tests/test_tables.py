"""The canonical tables' vocabularies hold for what the readers produce, and conform() guards the schema."""
import pyarrow as pa
import pytest

import perfsight
from perfsight.core.tables import FLOW_KINDS, SLICE_KINDS, TRACK_KINDS, conform


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
