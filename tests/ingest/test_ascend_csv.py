"""Ascend CSV exports read by header name: aliases across dialects, exact ns from tab-suffixed texts,
units, and errors that name the file and the column."""
from __future__ import annotations

import csv

import pyarrow as pa
import pytest

from perfsight.core.errors import InputError
from perfsight.ingest.ascend.ascend_csv import bytes_from, ns_from_us, number_rows, numbers, read_csv
from perfsight.ingest.common.columns import exact_ns

OUTPUT = "ascend/torch_npu/text/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
DIALECTS = ["ascend/msprof_analyze_fixtures/ut/advisor/advisor_backend/compute_advice/kernel_details.csv",
            "ascend/msprof_analyze_fixtures/ut/advisor/compute_advice/data/kernel_details.csv"]


@pytest.mark.parametrize("relpath", [f"{OUTPUT}/kernel_details.csv", *DIALECTS])
def test_kernel_details_dialects_read_to_the_same_columns(shared_data, relpath):
    table = read_csv(shared_data / relpath, required=["name", "op_type", "task_type", "start_us", "duration_us",
                                                      "block_dim", "input_shapes"])
    with open(shared_data / relpath, newline="", encoding="utf-8-sig") as file:
        assert table.num_rows == sum(1 for _ in csv.reader(file)) - 1              # every data row, header aside
    starts = ns_from_us(table["start_us"])
    assert starts.null_count == 0 and min(starts.to_pylist()) > 10 ** 18      # epoch ns, kept exact


def test_times_are_exact_and_units_are_bytes(shared_data, tmp_path):
    path = tmp_path / "memory_record.csv"
    path.write_text('Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Device Type\n'
                    'APP,1736408883573957.920\t,1.5,N/A,NPU:0\n'
                    'APP,"1736408883593933.001\t",,2109.6015625,NPU:0\n')
    table = read_csv(path, required=["timestamp_us"])
    assert ns_from_us(table["timestamp_us"]).to_pylist() == \
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


def test_a_missing_required_column_is_a_clear_error(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text("Name,Start Time(us)\nMatMul,12.5x\n")
    with pytest.raises(InputError, match=r"kernel_details.csv: missing required column duration_us "
                                         r"\(as 'Duration\(us\)'.*the file's columns are Name, Start Time\(us\)"):
        read_csv(path, required=["name", "duration_us"])


def test_a_value_that_is_not_a_number_costs_its_row_named_by_line_and_header(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text('Name,Start Time(us),Duration(us),Step Id\n'
                    'MatMul,12.5x,1,1\n'                                  # line 2
                    'Add,"13\t",2,1\n'
                    '\n'                                                  # a blank line: not a record
                    'Mul,14,abc,1\n'                                      # line 5
                    'Cut,15\n'                                            # line 6: ragged
                    'Sub,"16",3,"a\nb"\n'                                 # lines 7-8: Step Id spans lines
                    'Div,99999999999999999.5,4,\n'                        # line 9: beyond int64 ns
                    'Neg,18,N/A,2\n')                                     # N/A: null, no damage
    warnings: list[str] = []
    table = read_csv(path, warnings, required=["start_us", "duration_us"])
    kept = number_rows(table, path, warnings, times=["start_us", "duration_us"], numbers=["step", "absent"])
    assert kept["name"].to_pylist() == ["Add", "Neg"]
    assert ns_from_us(kept["start_us"]).to_pylist() == [13_000, 18_000]
    assert ns_from_us(kept["duration_us"]).to_pylist() == [2_000, None]
    assert warnings == [
        "kernel_details.csv: 1 row not read: line 6 has 2 fields (the header has 4)",
        "kernel_details.csv: 4 rows not read: line 2: Start Time(us) '12.5x' is not a number, line 5: Duration(us) "
        "'abc' is not a number, line 7: Step Id 'a\\nb' is not a number, line 9: Start Time(us) "
        "'99999999999999999.5' is beyond the times perfsight holds (int64 ns)"]


def test_a_time_a_spreadsheet_rounded_costs_its_row(tmp_path):
    """memory_record.csv saved by a spreadsheet: ``1.69512E+15`` keeps 6 significant digits, a time rounded to
    10^10 us (about 3 hours), which would put the memory peak outside every step. A time in exponent form
    that keeps its microseconds (1.695120000123456E+15: rounded to 0.1 us) or a small one rounded within
    TIME_ROUNDING_US is read."""
    path = tmp_path / "memory_record.csv"
    path.write_text("Component,Timestamp(us),Total Allocated(MB)\n"
                    "PTA,1.69512E+15,10\n"                              # line 2
                    "PTA,1.695120000123456E+15,11\n"
                    "PTA,1.5e3,12\n"                                    # rounded to 100 us: within 1 ms
                    "PTA,2.5E+9,13\n")                                  # line 5: rounded to 10^8 us
    warnings: list[str] = []
    kept = number_rows(read_csv(path, warnings), path, warnings, times=["timestamp_us"])
    assert ns_from_us(kept["timestamp_us"]).to_pylist() == [1_695_120_000_123_456_000, 1_500_000]
    assert warnings == ["memory_record.csv: 2 rows not read: line 2: Timestamp(us) '1.69512E+15' is a time rounded "
                        "to 1e+10 us: not a time of day, line 5: Timestamp(us) '2.5E+9' is a time rounded to 1e+08 "
                        "us: not a time of day"]


def test_a_time_beyond_int64_nanoseconds_is_null_not_a_traceback():
    assert exact_ns(pa.array(["1.5", "99999999999999999.5"])) == (pa.array([1500, None], pa.int64()), 1)


def test_json_object_tolerates_what_args_columns_hold():
    from perfsight.ingest.ascend.ascend_csv import json_object

    assert json_object('{"a": 1}') == {"a": 1}
    assert json_object(None) == json_object("") == json_object("[1, 2]") == json_object("{broken") == {}
