"""read_kineto on damaged traces and on files that are not traces: partial results and warnings, or InputError."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.compute as pc
import pytest
from conftest import number

from perfsight.core.errors import InputError
from perfsight.ingest.kineto.reader import read_kineto
from tests.conftest import SHARED_DATA

KINETO = SHARED_DATA / "kineto"
TORCH_213 = KINETO / "generated_torch213_cpu" / "cpu_mlp_rs_mem_stack.pt.trace.json.gz"  # indented, like torch
NCCL_DATA = KINETO / "hta" / "nccl_parser_config" / "nccl_data.json.gz"  # 9.8 MB: several decode batches

real_traces = pytest.mark.skipif(not TORCH_213.is_file(), reason=f"the real traces are not at {KINETO}")


def warnings(run) -> list[str]:
    return json.loads(run.meta_dict()["parse_warnings"])


def slice_keys(run) -> set:
    """(name, start_ns, dur_ns) with start_ns on the trace's own clock (a cut can lose baseTimeNanoseconds,
    which torch may write after the events)."""
    base = int(run.meta_dict()["base_time_ns"] or 0)
    return {(name, start - base, dur) for name, start, dur in zip(
        *(run.slices[column].to_pylist() for column in ("name", "start_ns", "dur_ns")))}


def assert_partial(damaged: Path, intact: Path, *warned: str) -> None:
    """``damaged`` reads as a part of ``intact``, with a warning that contains every one of ``warned``."""
    whole, partial = read_kineto([intact]), read_kineto([damaged])
    assert 0 < partial.slices.num_rows < whole.slices.num_rows
    assert slice_keys(partial) <= slice_keys(whole)
    assert any(all(text in warning for text in warned) for warning in warnings(partial))


@real_traces
@pytest.mark.parametrize("trace, fraction", [(TORCH_213, 0.5), (NCCL_DATA, 0.9), (NCCL_DATA, 0.3)])
def test_a_trace_cut_off_mid_file_keeps_the_events_before_the_cut(tmp_path, trace, fraction):
    text = gzip.decompress(trace.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[:int(len(text) * fraction)])
    assert_partial(cut, trace, "truncated", "skipped")


@real_traces
def test_a_cut_gzip_file_keeps_what_decompresses(tmp_path):
    data = TORCH_213.read_bytes()
    cut = tmp_path / "cut.pt.trace.json.gz"
    cut.write_bytes(data[:len(data) // 2])
    assert_partial(cut, TORCH_213, "gzip stream truncated")


def assert_skipped_one_event(damaged: Path, intact: Path) -> None:
    """``damaged`` reads as ``intact`` but for the event the damage hit, with a warning that says so."""
    whole, partial = read_kineto([intact]), read_kineto([damaged])
    assert slice_keys(partial) <= slice_keys(whole)
    assert whole.slices.num_rows - 1 <= partial.slices.num_rows
    assert any("malformed JSON after byte" in w and "to the next event and read on" in w for w in warnings(partial))


@real_traces
def test_garbage_in_the_middle_skips_only_the_damaged_event(tmp_path):
    text = gzip.decompress(NCCL_DATA.read_bytes())
    middle = len(text) // 2
    damaged = tmp_path / "damaged.json"
    damaged.write_bytes(text[:middle] + b"\x00@@ not json @@" + text[middle:])
    assert_skipped_one_event(damaged, NCCL_DATA)


@real_traces
@pytest.mark.parametrize("where", [0.1, 0.5, 0.97])
def test_one_changed_byte_loses_one_event_not_the_rest_of_the_file(tmp_path, where):
    """A quote turned into a letter inside an event of an indented torch trace, early, midway and near the end."""
    text = gzip.decompress(TORCH_213.read_bytes())
    quote = text.index(b'"name"', int(len(text) * where))
    damaged = tmp_path / "damaged.pt.trace.json"
    damaged.write_bytes(text[:quote] + b"x" + text[quote + 1:])
    assert_skipped_one_event(damaged, TORCH_213)


def every_nth_event_broken(path: Path, events: int, n: int, separator: str) -> Path:
    """A trace of ``events`` one-microsecond ops at ts = their index, every ``n``-th of them broken JSON."""
    good = '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": %d, "dur": 1}'
    path.write_text('{"traceEvents": [' + separator.join(
        good % i if i % n else '{"ph": "X", "name": @broken@}' for i in range(events)) + "]}")
    return path


def test_damage_in_every_batch_is_counted_after_the_first_warnings(tmp_path):
    from perfsight.ingest.common.chrome_json import MAX_DAMAGE_WARNINGS

    run = read_kineto([every_nth_event_broken(tmp_path / "t.json", 60, 3, ",\n")])
    assert run.slices.num_rows == 40 and sorted(run.slices["start_ns"].to_pylist()) == [
        i * 1000 for i in range(60) if i % 3]
    damage = [w for w in warnings(run) if "malformed JSON" in w or "damaged stretches" in w]
    assert len(damage) == MAX_DAMAGE_WARNINGS + 1
    assert damage[-1] == f"t.json: {20 - MAX_DAMAGE_WARNINGS} more damaged stretches skipped in the same way"


def test_a_trace_cut_inside_its_header_is_empty_with_a_warning(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "a", "ts": 1')
    run = read_kineto([path])
    assert run.slices.num_rows == 0
    assert warnings(run)


@pytest.mark.parametrize("content, expected", [
    (b'{"schema": "1.0.1", "nodes": []}', 'without "traceEvents"'),
    (b"[1, 2, 3]", "no element of its events array is an event object (3 elements of traceEvents that are not "
                   "event objects, the first (a number) at byte 1 of the JSON text)"),
    (b"", "empty file"),
    (b"\x00\x01 binary", "not JSON"),
    (b"{not json at all", "malformed JSON"),
    (gzip.compress(b"hello", mtime=0), "not JSON"),
    (b"\x1f\x8b\x08 not really gzip", "not a readable gzip file"),
])
def test_files_that_are_not_traces_raise_input_error_naming_the_file(tmp_path, content, expected):
    path = tmp_path / "not_a_trace.json"
    path.write_bytes(content)
    with pytest.raises(InputError) as raised:
        read_kineto([path])
    assert str(path) in str(raised.value) and expected in str(raised.value)
    assert "traceEvents" in str(raised.value)


@real_traces
def test_a_chakra_execution_trace_is_not_a_kineto_trace():
    path = KINETO / "hta" / "execution_trace" / "benchmark_simple_add_et.json.gz"
    with pytest.raises(InputError, match="benchmark_simple_add_et.json.gz"):
        read_kineto([path])


def test_a_missing_file_or_no_file_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="missing.json"):
        read_kineto([tmp_path / "missing.json"])
    with pytest.raises(InputError):
        read_kineto([])


def test_metadata_only_trace_has_no_slices(write_trace):
    run = read_kineto([write_trace([{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": 0,
                                     "args": {"name": "python"}}])])
    assert run.slices.num_rows == 0 and run.tracks.num_rows == 0 and warnings(run) == []


def test_unusable_events_are_skipped_and_counted(write_trace):
    def event(**fields):
        return {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": number("10"),
                "dur": number("1")} | fields

    events = [
        event(),
        {key: value for key, value in event().items() if key != "ts"},
        {key: value for key, value in event().items() if key != "name"},
        event(name=42),
        event(ts="soon"),
        event(dur=number("-5")),
        {key: value for key, value in event(name="no dur").items() if key != "dur"},
        event(name="odd args", args=[1, 2]),
        event(name="null args", args=None),
        event(name="bad id", args={"correlation": "x", "External id": 1.5}),
        {"ph": "B", "name": "begin", "pid": 1, "tid": 1, "ts": 1},
    ]
    run = read_kineto([write_trace(events)])
    assert sorted(run.slices["name"].to_pylist()) == ["bad id", "no dur", "null args", "odd args", "op", "op"]
    assert dict(zip(run.slices["name"].to_pylist(), run.slices["dur_ns"].to_pylist()))["no dur"] == 0
    assert min(run.slices["dur_ns"].to_pylist()) == 0
    reported = "\n".join(warnings(run))
    for what in ("1 complete events without ts", "1 complete events with a ts that is not a number",
                 "2 complete events without a name", "1 complete events with a negative dur (set to 0)",
                 "1 complete events without a usable dur (set to 0)", "1 events of unsupported phase 'B'",
                 "1 events whose args are not an object", "'correlation' that are not integers",
                 "'external_id' that are not integers"):
        assert what in reported


def test_a_trace_cut_before_its_events_is_empty_with_a_warning(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "na')
    run = read_kineto([path])
    assert run.slices.num_rows == 0
    assert "before the events" in warnings(run)[0]


def test_invalid_utf8_is_replaced_with_a_warning(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "caf\xe9", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}')
    run = read_kineto([path])
    assert run.slices["name"].to_pylist() == ["caf\ufffd"]
    assert "invalid UTF-8" in warnings(run)[0]


def test_times_beyond_the_clock_range_are_skipped_and_every_analysis_runs(write_trace):
    """A slice at 9e12 us lasting 9e12 us would overflow int64 in any start + duration: it is skipped
    (counted), and so is an event before -2^62 ns; a ProfilerStep number beyond int32 is no step."""
    import perfsight
    from perfsight.analysis.summary import run_summary

    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1}
    path = write_trace([{**op, "name": "ProfilerStep#1", "ts": 0, "dur": 100},
                        {**op, "name": "aten::mm", "ts": 10, "dur": 20},
                        {**op, "name": "huge", "ts": 9_000_000_000_000_000, "dur": 9_000_000_000_000_000},
                        {**op, "name": "long ago", "ts": -9_000_000_000_000_000, "dur": 1},
                        {**op, "name": "ProfilerStep#99999999999", "ts": 200, "dur": 10}])
    run = read_kineto([path])
    assert sorted(run.slices["name"].to_pylist()) == ["ProfilerStep#1", "ProfilerStep#99999999999", "aten::mm"]
    assert "2 events beyond +-2^62 ns (146 years) from the clock's zero (skipped)" in warnings(run)
    assert run.slices.filter(pc.equal(run.slices["kind"], "step"))["step"].to_pylist() == [1]
    summary = run_summary(perfsight.open(path).tables)
    assert summary["profiled_steps"]["step"].to_pylist() == [1]


def test_thousands_of_damaged_events_in_one_batch_are_read_around(tmp_path):
    """More damaged stretches than Python's recursion limit, all in the last (and only) batch."""
    run = read_kineto([every_nth_event_broken(tmp_path / "t.json", 5000, 2, ",")])
    assert run.slices.num_rows == 2500
    assert warnings(run)[-1] == "t.json: 2490 more damaged stretches skipped in the same way"
