"""Every analysis of the Run API on damaged real traces (cut, a byte changed, a stretch deleted, junk
inserted): results, or an InputError that says what is wrong; never another exception."""
import gzip
import json
import random

import pytest

import perfsight
from perfsight.core.errors import InputError
from perfsight.run import Run

TRACES = ["hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",                 # ROCm
          "generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz",             # CPU, memory events
          "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"]  # CUDA
JUNK = [b'"', b"{", b"}", b",", b"null", b"-1e999", b'"ts": "x",', b"99999999999999999999999"]
#: the analyses that need arguments beyond the run
NEEDS_ARGUMENTS = {"sql", "alive_at", "alive_by_op_at", "node_links", "what_if"}


def damaged(raw: bytes, how: str, rng: random.Random) -> bytes:
    at = rng.randrange(len(raw))
    if how == "cut":
        return raw[:at]
    if how == "changed":
        return raw[:at] + bytes([rng.choice(b'{}[]",:0123456789aeE.-')]) + raw[at + 1:]
    if how == "deleted":
        return raw[:at] + raw[at + rng.randint(1, 200):]
    return raw[:at] + rng.choice(JUNK) + raw[at:]


def analyses() -> list[str]:
    return sorted(name for name in vars(Run)
                  if not name.startswith("_") and name not in NEEDS_ARGUMENTS and callable(getattr(Run, name)))


def test_the_analyses_listed_are_the_run_api():
    assert {"temporal_breakdown", "kernel_breakdown", "step_trace", "memory_peak", "data_verdict",
            "op_shapes_by_step", "launch_stats", "collective_summary"} <= set(analyses())


@pytest.mark.parametrize("how", ["cut", "changed", "deleted", "inserted"])
@pytest.mark.parametrize("trace", TRACES)
def test_every_analysis_of_a_damaged_trace_gives_results_or_input_error(shared_data, tmp_path, trace, how):
    raw = gzip.decompress((shared_data / "kineto" / trace).read_bytes())
    rng = random.Random(f"{trace} {how}")
    for copy in range(2):
        path = tmp_path / f"{copy}.pt.trace.json"
        path.write_bytes(damaged(raw, how, rng))
        try:
            run = perfsight.open(path, use_cache=False)
        except InputError as error:
            assert path.name in str(error)
            continue
        for name in analyses():
            try:
                getattr(run, name)()
            except InputError as error:
                assert str(error), name


HOSTILE_HEADERS = [{"deviceProperties": 5}, {"deviceProperties": [{"id": 0, "name": "x", "totalGlobalMem": "big"}]},
                   {"deviceProperties": None}, {"baseTimeNanoseconds": 1 << 70},
                   {"distributedInfo": {"rank": 1 << 40, "world_size": -3}}]


@pytest.mark.parametrize("header", HOSTILE_HEADERS, ids=lambda h: str(h)[:40])
def test_values_of_the_wrong_type_or_size_give_results(tmp_path, header):
    """Found by fuzzing: each of these raised. Every analysis, the summary, its terminal report and the
    exports now give results."""
    from io import StringIO

    from rich.console import Console

    from perfsight.analysis.summary import run_summary
    from perfsight.views.export import export
    from perfsight.views.terminal import print_summary
    from tests.ingest.conftest import trace_text

    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1}
    kernel = {"ph": "X", "cat": "kernel", "pid": 0, "tid": "stream 99999999999", "ts": 30, "dur": 5,
              "args": {"correlation": 1}}
    events = [{**op, "name": "ProfilerStep#1", "ts": 0, "dur": 100},
              {**op, "name": "nccl:all_reduce", "ts": 10, "dur": 5,
               "args": {"Input Dims": [[1 << 40, 1 << 40]], "Input type": ["float"]}},
              {**kernel, "name": "gemm"}, {"ph": ["X"], "name": "odd", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
              {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": 1, "args": {"sort_index": 1 << 40}},
              {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12, "s": "t",
               "args": {"Addr": 1, "Bytes": (1 << 62) + 1, "Total Allocated": 1 << 62, "Total Reserved": 0,
                        "Device Type": 0, "Device Id": -1}},
              {**op, "name": "record_param_comms", "ts": 40, "dur": 5, "args": {
                  "Collective name": "allreduce", "Process Group Ranks": "[0, 99999999999]", "In msg nelems": 10,
                  "dtype": "Float"}},
              {**op, "name": "record_param_comms", "ts": 50, "dur": 5, "args": {
                  "Collective name": "allreduce", "Process Group Ranks": "[0, 1, ...]", "Group size": 10 ** 12,
                  "Global rank start": 0, "Global rank stride": 1, "In msg nelems": 10, "dtype": "Float"}},
              *[{**op, "tid": tid, "name": "aten::mm", "ts": 0, "dur": 1 << 52} for tid in (2, 3, 4)],
              {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 13, "s": "t",
               "args": {"Addr": 2, "Bytes": 8, "Total Allocated": 8, "Total Reserved": 0,
                        "Device Type": 0, "Device Id": -1}}]
    path = tmp_path / "hostile.pt.trace.json"
    path.write_text(trace_text(events, **header))
    run = perfsight.open(path)
    for name in analyses():
        getattr(run, name)()
    print_summary(str(path), run_summary(run.tables), Console(file=StringIO(), width=80))
    assert export(path, output=tmp_path / "out")[path]
    assert sorted(run.tables.slices["name"].to_pylist()) == ["ProfilerStep#1", "gemm", "nccl:all_reduce",
                                                              "record_param_comms", "record_param_comms"]
    warned = " ".join(json.loads(run.meta["parse_warnings"]))
    assert "events of unsupported phase 'list'" in warned and "memory events of more than 2^50 bytes" in warned
    assert "3 complete events lasting more than 2^50 ns (13 days) (skipped)" in warned
    assert run.collectives()["group_ranks"].to_pylist()[-2:] == [None, None]   # beyond int32; 10^12 ranks
    assert run.tables.memory["bytes"].to_pylist() == [8]
