"""perfsight.open: one run, or several ranks merged into one job with unique ids; the step points it
takes from the environment and from the run's options."""
import csv
import json
import shutil
from decimal import Decimal

import pyarrow.compute as pc
import pytest

import perfsight
from perfsight.analysis.steps import step_trace
from perfsight.core.errors import InputError
from perfsight.ingest.kineto.reader import read_kineto


def test_a_folder_of_rank_traces_opens_as_one_job(shared_data):
    folder = shared_data / "kineto/hta/trace_filter"
    run = perfsight.open(folder)
    assert run.ranks == [0, 1]
    singles = [read_kineto([folder / f"sampled_rank-{r}.json.gz"]) for r in (0, 1)]
    slices, tracks = run.tables.slices, run.tables.tracks
    assert slices.num_rows == sum(t.slices.num_rows for t in singles)
    assert pc.count_distinct(slices["id"]).as_py() == slices.num_rows
    assert pc.count_distinct(tracks["track_id"]).as_py() == tracks.num_rows
    ids = set(slices["id"].to_pylist())
    assert set(run.tables.flows["src_id"].to_pylist()) <= ids and set(run.tables.flows["dst_id"].to_pylist()) <= ids
    assert set(slices["parent_id"].drop_null().to_pylist()) <= ids
    per_rank = run.sql("SELECT t.rank, count(*) AS n FROM slices s JOIN tracks t USING (track_id) "
                       "GROUP BY 1 ORDER BY 1").to_pylist()
    assert per_rank == [{"rank": 0, "n": singles[0].slices.num_rows}, {"rank": 1, "n": singles[1].slices.num_rows}]
    steps = run.step_trace()
    assert sorted(set(steps["rank"].to_pylist())) == [0, 1] and run.steps == [551, 552]


def test_the_same_rank_twice_is_not_a_job(shared_data, tmp_path):
    source = shared_data / "kineto/hta/trace_filter/sampled_rank-0.json.gz"
    shutil.copy(source, tmp_path / "a.json.gz")
    shutil.copy(source, tmp_path / "b.json.gz")
    with pytest.raises(InputError, match="ranks repeat"):
        perfsight.open(tmp_path)


def test_methods_are_the_analysis_functions(shared_data):
    from perfsight.analysis import ops

    run = perfsight.open(shared_data / "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz")
    assert run.op_statistic().equals(ops.op_statistic(run.tables))
    assert run.op_statistic.__doc__ == ops.op_statistic.__doc__
    assert run.op_statistic(by="name").num_rows > 0
    assert run.steps == [2, 3, 4] and "Run" in repr(run)


def test_every_run_method_names_an_existing_analysis():
    from perfsight.run import Run, _Analysis

    methods = [name for name, value in vars(Run).items() if isinstance(value, _Analysis)]
    assert len(methods) > 20
    for name in methods:
        assert callable(getattr(Run, name)), name


def test_traces_that_do_not_say_their_rank_are_not_merged(shared_data):
    with pytest.raises(InputError, match="2 of 2 do not say their rank, in their data or name"):
        perfsight.open(shared_data / "kineto/generated_torch213_cpu")


def _step_trace(path, rank: int | None = None, op: str = "aten::mm"):
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
              {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": 10, "dur": 50}]
    trace = {"traceEvents": events}
    if rank is not None:
        trace["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
    path.write_text(json.dumps(trace))


def test_traces_without_distributed_info_take_the_rank_in_their_name(tmp_path):
    for rank in (0, 1):
        _step_trace(tmp_path / f"train_rank{rank}.pt.trace.json", op=f"op_of_rank_{rank}")
    run = perfsight.open(tmp_path)
    assert run.ranks == [0, 1]
    names = run.sql("SELECT t.rank, s.name FROM slices s JOIN tracks t USING (track_id) WHERE s.kind = 'cpu_op' "
                    "ORDER BY 1").to_pylist()
    assert names == [{"rank": 0, "name": "op_of_rank_0"}, {"rank": 1, "name": "op_of_rank_1"}]


def test_the_data_rank_wins_over_the_name_and_repeats_are_refused(tmp_path):
    _step_trace(tmp_path / "rank0.pt.trace.json", rank=1)
    _step_trace(tmp_path / "rank1.pt.trace.json")
    with pytest.raises(InputError, match=r"ranks repeat \(1\): .*rank0.pt.trace.json \(rank 1\), .*rank1.pt.trace.json "
                                         r"\(rank 1\); open them one by one"):
        perfsight.open(tmp_path)


def test_the_error_over_many_traces_is_a_summary(tmp_path):
    for i in range(200):
        _step_trace(tmp_path / f"worker{i:03}.pt.trace.json")
    with pytest.raises(InputError) as raised:
        perfsight.open(tmp_path)
    message = str(raised.value)
    assert "these 200 runs are not one job's ranks: 200 of 200 do not say their rank" in message
    assert "worker004.pt.trace.json and 195 more; open them one by one" in message
    assert "worker005" not in message and len(message) < 1000


CPU_TRACE = "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"


def _bp_ends(run) -> list[int]:
    return run.step_trace().column("bp_end_ns").to_pylist()


def test_step_points_from_the_environment_reach_every_surface(shared_data, tmp_path, monkeypatch):
    """PERFSIGHT_BP_END names the backward end for the Python API, the summary and the exported files."""
    from perfsight.analysis.summary import run_summary
    from perfsight.views.export import export

    trace = shared_data / CPU_TRACE
    automatic = perfsight.open(trace)
    monkeypatch.setenv("PERFSIGHT_BP_END", "aten::addmm")
    pinned = perfsight.open(trace)
    assert pinned.meta["bp_point"] == "aten::addmm" and "bp_point" not in automatic.meta
    expected = step_trace(automatic.tables, bp_point="aten::addmm").column("bp_end_ns").to_pylist()
    assert _bp_ends(pinned) == expected and all(p < a for p, a in zip(expected, _bp_ends(automatic)))
    assert run_summary(pinned.tables)["profiled_steps"].column("bp_end_ns").to_pylist() == expected
    [files] = export(trace, timeline=True, summary=True, output=tmp_path).values()
    [summary_file] = [f for f in files if f.name.startswith("step_trace_") and f.suffix == ".csv"]
    with summary_file.open() as rows:
        exported = [int(Decimal(row["BP End(us)"]) * 1000) for row in csv.DictReader(rows)]
    assert exported == expected


def test_a_runs_own_points_are_used_and_missing_ones_are_said(perfsight_run, tmp_path):
    from perfsight.analysis.summary import run_summary

    run_dir = tmp_path / perfsight_run.name
    shutil.copytree(perfsight_run, run_dir, ignore=shutil.ignore_patterns(".perfsight_cache*", "perfsight_output"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["options_resolved"].update(fp_point="aten::linear", bp_point="no_such_op")
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    run = perfsight.open(run_dir)
    assert run.step_trace().to_pylist() == step_trace(run.tables, fp_point="aten::linear",
                                                      bp_point="no_such_op").to_pylist()
    assert _bp_ends(run) and set(_bp_ends(run)) == {None}
    steps = run.steps
    [warning] = run_summary(run.tables)["warnings"]
    assert warning.startswith(f"bp_point 'no_such_op' names no host operator in {len(steps)} of {len(steps)} "
                              f"steps ({', '.join(map(str, steps))})")


def test_methods_keep_the_signature_of_their_analysis(shared_data):
    import inspect

    run = perfsight.open(shared_data / CPU_TRACE)
    assert list(inspect.signature(run.step_trace).parameters) == ["fp_point", "bp_point"]
