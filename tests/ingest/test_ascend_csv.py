"""Ascend CSV exports read by header name: aliases across dialects, exact ns from tab-suffixed texts,
units, and errors that name the file and the column."""
from __future__ import annotations

import csv

import pytest

from perfsight.core.errors import InputError
from perfsight.ingest.ascend.ascend_csv import bytes_from, ns_from_us, numbers, read_csv

OUTPUT = "ascend/torch_npu/text/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
DIALECTS = ["ascend/msprof_analyze_fixtures/ut/advisor/advisor_backend/compute_advice/kernel_details.csv",
            "ascend/msprof_analyze_fixtures/ut/advisor/compute_advice/data/kernel_details.csv"]


@pytest.mark.parametrize("relpath", [f"{OUTPUT}/kernel_details.csv", *DIALECTS])
def test_kernel_details_dialects_read_to_the_same_columns(shared_data, relpath):
    table = read_csv(shared_data / relpath, required=["name", "op_type", "task_type", "start_us", "duration_us",
                                                      "block_dim", "input_shapes"])
    with open(shared_data / relpath, newline="", encoding="utf-8-sig") as file:
        assert table.num_rows == sum(1 for _ in csv.reader(file)) - 1              # every data row, header aside
    starts = ns_from_us(table["start_us"], "start_us", shared_data / relpath)
    assert starts.null_count == 0 and min(starts.to_pylist()) > 10 ** 18      # epoch ns, kept exact


def test_times_are_exact_and_units_are_bytes(shared_data, tmp_path):
    path = tmp_path / "memory_record.csv"
    path.write_text('Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Device Type\n'
                    'APP,1736408883573957.920\t,1.5,N/A,NPU:0\n'
                    'APP,"1736408883593933.001\t",,2109.6015625,NPU:0\n')
    table = read_csv(path, required=["timestamp_us"])
    assert ns_from_us(table["timestamp_us"], "timestamp_us", path).to_pylist() == \
        [1736408883573957920, 1736408883593933001]
    assert bytes_from(table["total_allocated_mb"], "MB").to_pylist() == [1572864, None]
    assert bytes_from(table["total_reserved_mb"], "MB").to_pylist() == [None, 2212077568]
    assert numbers(table["total_reserved_mb"]).to_pylist() == [None, 2109.6015625]


def test_multiline_fields_and_unknown_columns_are_kept(tmp_path):
    path = tmp_path / "operator_details.csv"
    path.write_text('Name,Input Shapes,Call Stack,Brand New Column\n'
                    'aten::add,"""4,1025""","a.py(1): f\nb.py(2): g",x\n')
    table = read_csv(path, required=["name"])
    assert table.column_names == ["name", "input_shapes", "Call Stack", "Brand New Column"]
    assert table["Call Stack"].to_pylist() == ["a.py(1): f\nb.py(2): g"]


def test_missing_required_column_and_bad_times_are_clear_errors(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text("Name,Start Time(us)\nMatMul,12.5x\n")
    with pytest.raises(InputError, match=r"kernel_details.csv: missing required column duration_us "
                                         r"\(as 'Duration\(us\)'.*the file's columns are Name, Start Time\(us\)"):
        read_csv(path, required=["name", "duration_us"])
    table = read_csv(path, required=["start_us"])
    with pytest.raises(InputError, match=r"kernel_details.csv: column start_us holds '12.5x'"):
        ns_from_us(table["start_us"], "start_us", path)


def test_json_object_tolerates_what_args_columns_hold():
    from perfsight.ingest.ascend.ascend_csv import json_object

    assert json_object('{"a": 1}') == {"a": 1}
    assert json_object(None) == json_object("") == json_object("[1, 2]") == json_object("{broken") == {}
