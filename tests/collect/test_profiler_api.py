"""perfsight.Profiler in-process: the PyTorch/MindSpore idioms, marks, callbacks and the failsafe."""
import csv
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import perfsight  # noqa: E402
from perfsight.collect.callbacks import HuggingFaceCallback, LightningCallback  # noqa: E402
from perfsight.core import layout  # noqa: E402


def train(profiler, steps, on_step=None):
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        if on_step:
            on_step(step)
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        profiler.step()


def steps_in_traces(run_dir):
    names = set()
    for trace in (run_dir / layout.HOST_DATA).glob(layout.TRACE_GLOB):
        names |= {e["name"] for e in json.loads(trace.read_text())["traceEvents"]
                  if str(e.get("name", "")).startswith("ProfilerStep#")}
    return sorted(int(n.split("#")[1]) for n in names)


def manifest(run_dir):
    return json.loads((run_dir / layout.MANIFEST).read_text())


def test_context_manager_with_a_step_range(tmp_path):
    with perfsight.Profiler(output_path=tmp_path, steps="3-4", warmup_steps=1) as prof:
        train(prof, 7)
    assert steps_in_traces(prof.run_dir) == [3, 4]
    m = manifest(prof.run_dir)
    assert m["status"] == "complete" and m["steps_collected"] == [3, 4]
    assert len(m["traces"]) == 1


def test_start_profile_false_then_start_and_stop_at_chosen_steps(tmp_path):
    prof = perfsight.Profiler(output_path=tmp_path, start_profile=False)
    assert prof.run_dir is None

    def at(step):
        if step == 2:
            prof.start()
        if step == 4:
            prof.stop()
    train(prof, 6, on_step=at)
    prof.close()
    assert manifest(prof.run_dir)["steps_collected"] == [2, 3]
    assert {2, 3} <= set(steps_in_traces(prof.run_dir)) <= {2, 3, 4}   # stop() closes step 4 just begun
    with open(prof.run_dir / layout.HOST_DATA / layout.STEPS) as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [2, 3, 4, 5]


def test_epoch_range(tmp_path):
    prof = perfsight.Profiler(output_path=tmp_path, start_profile=False, epochs="1-1")
    for epoch in range(3):
        prof.epoch_begin(epoch)
        train(prof, 2)
        prof.epoch_end(epoch)
    prof.close()
    assert manifest(prof.run_dir)["steps_collected"] == [2, 3]     # steps count from the Profiler's creation


def test_analyse_exports_the_msprof_files(tmp_path):
    prof = perfsight.Profiler(output_path=tmp_path)
    train(prof, 3)
    out = prof.analyse()
    names = {p.name.split("_2")[0] for p in out.iterdir()}
    assert {"msprof", "op_summary", "op_statistic", "step_trace", "README.txt"} <= names


def test_mark_is_recorded_in_the_trace_and_in_msproftx_when_on(tmp_path):
    with perfsight.Profiler(output_path=tmp_path, msproftx="on") as prof:
        with perfsight.mark("load weights"):
            torch.ones(3).sum()

        @perfsight.mark("evaluate")
        def evaluate():
            return torch.ones(2).sum()
        evaluate()
        evaluate()
    trace_names = set()
    for trace in (prof.run_dir / layout.HOST_DATA).glob(layout.TRACE_GLOB):
        trace_names |= {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert {"load weights", "evaluate"} <= trace_names
    with open(prof.run_dir / layout.HOST_DATA / layout.MSPROFTX) as f:
        rows = list(csv.DictReader(f))
    assert [r["name"] for r in rows] == ["load weights", "evaluate", "evaluate"]
    assert all(int(r["end_ns"]) >= int(r["start_ns"]) for r in rows)


def test_mark_without_msproftx_writes_no_csv(tmp_path):
    with perfsight.Profiler(output_path=tmp_path) as prof:
        with perfsight.mark("x"):
            pass
    assert not (prof.run_dir / layout.HOST_DATA / layout.MSPROFTX).exists()


def test_an_internal_failure_stops_profiling_but_not_training(tmp_path, monkeypatch):
    prof = perfsight.Profiler(output_path=tmp_path, flush_every=1)

    def broken(self, path):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", broken)
    train(prof, 4)                                      # must not raise
    prof.close()
    m = manifest(prof.run_dir)
    assert m["status"] == "failed" and "no space left on device" in m["errors"][0]
    log = (prof.run_dir / layout.HOST_DATA / layout.COLLECT_LOG).read_text()
    assert "profiling stopped, training continues" in log
    assert log.count("no space left on device") >= 1


def test_a_full_disk_leaves_no_partial_trace_and_a_failed_run(tmp_path, monkeypatch, capsys):
    """Kineto, on a full disk, logs an error, leaves its '<name>.tmp' and writes nothing: the run is marked
    failed with the reason, the temp files are gone, and the user is told where the run went."""
    from types import SimpleNamespace

    from perfsight.collect import profiler as profiler_module

    def kineto_on_a_full_disk(self, path):
        Path(path + ".tmp").write_bytes(b'{"traceEvents": [{"ph": "X", "na')
    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", kineto_on_a_full_disk)
    monkeypatch.setattr(profiler_module.shutil, "disk_usage", lambda path: SimpleNamespace(free=3 << 20))
    monkeypatch.delenv("PERFSIGHT_LAUNCHER", raising=False)
    prof = perfsight.Profiler(output_path=tmp_path, flush_every=1)
    train(prof, 3)
    prof.close()
    m = manifest(prof.run_dir)
    assert m["status"] == "failed" and m["traces"] == []
    assert m["errors"][0].startswith("recording a step failed: PerfsightError: writing trace window "
                                     "trace_0000.pt.trace.json failed: no space left on device (3 MB free in ")
    assert sorted(p.name for p in (prof.run_dir / layout.HOST_DATA).iterdir()) == [
        layout.COLLECT_LOG, layout.STEPS]
    assert f"perfsight: run failed in {prof.run_dir}: recording a step failed" in capsys.readouterr().err


def test_the_profiler_says_where_the_run_went_once(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("PERFSIGHT_LAUNCHER", raising=False)
    with perfsight.Profiler(output_path=tmp_path) as prof:
        train(prof, 2)
    prof.close()
    assert capsys.readouterr().err.count(f"perfsight: run collected in {prof.run_dir}: steps 0-1 in 1 trace window "
                                         "(one every 10 steps: flush_every)\n") == 1


def test_bad_options_fail_when_the_profiler_is_made(tmp_path):
    with pytest.raises(perfsight.OptionError, match="storage_limit"):
        perfsight.Profiler(output_path=tmp_path, storage_limit=10)
    assert not any(tmp_path.iterdir())


class FakeHFState:
    def __init__(self):
        self.epoch = 0.0


def test_huggingface_callback_protocol(tmp_path):
    cb = HuggingFaceCallback(output_path=tmp_path, steps="1-2")
    state = FakeHFState()
    cb.on_train_begin(None, state, None)
    cb.on_epoch_begin(None, state, None)
    train(type("P", (), {"step": lambda self: cb.on_step_end(None, state, None)})(), 4)
    state.epoch = 1.0
    cb.on_epoch_end(None, state, None)
    cb.on_train_end(None, state, None)
    assert steps_in_traces(cb.profiler.run_dir) == [1, 2]
    assert cb.output_dir is not None and any(cb.output_dir.glob("op_statistic_*.csv"))


def test_lightning_callback_protocol_with_epoch_range(tmp_path):
    cb = LightningCallback(output_path=tmp_path, epochs="1-1")
    trainer = type("Trainer", (), {"current_epoch": 0})()
    cb.on_train_start(trainer, None)
    for epoch in range(3):
        trainer.current_epoch = epoch
        cb.on_train_epoch_start(trainer, None)
        train(type("P", (), {"step": lambda self: cb.on_train_batch_end(trainer, None, None, None, 0)})(), 2)
        cb.on_train_epoch_end(trainer, None)
    cb.on_train_end(trainer, None)
    assert manifest(cb.profiler.run_dir)["steps_collected"] == [2, 3]


def test_a_step_cut_by_stop_is_not_counted_as_a_step(tmp_path):
    from perfsight.analysis.steps import step_trace

    prof = perfsight.Profiler(output_path=tmp_path, start_profile=False)

    def at(step):
        if step == 1:
            prof.start()
        if step == 3:
            prof.stop()
    train(prof, 4, on_step=at)
    prof.close()
    assert 3 in steps_in_traces(prof.run_dir)          # torch leaves a stub ProfilerStep#3 ...
    assert step_trace(perfsight.load(prof.run_dir)).column("step").to_pylist() == [1, 2]   # ... not a step


def test_hardware_switches_are_recorded_and_reported_as_not_collected(tmp_path):
    with perfsight.Profiler(output_path=tmp_path, llc_profiling="write", sys_interconnection_freq=10,
                            aic_metrics="Custom:0x49,8", aicpu="yes") as prof:
        pass
    m = manifest(prof.run_dir)
    reported = {item["option"] for item in m["not_collected"]}
    assert {"llc_profiling", "sys_interconnection_freq", "aic_metrics"} <= reported
    assert m["options_given"]["aicpu"] == "yes" and m["options_resolved"]["aicpu"] == "off"   # seed 000 fallback
    log = (prof.run_dir / layout.HOST_DATA / layout.COLLECT_LOG).read_text()
    assert "llc_profiling: not collected" in log and "aicpu" in log


def test_output_beats_the_work_path_variable_and_relative_paths_use_the_cwd(tmp_path, monkeypatch):
    from perfsight.collect.rundir import resolve_output_root

    monkeypatch.chdir(tmp_path)
    env = {"PERFSIGHT_WORK_PATH": str(tmp_path / "work")}
    assert resolve_output_root("rel/out", env) == tmp_path / "rel" / "out"
    assert (tmp_path / "rel" / "out").is_dir()
    assert resolve_output_root(None, env) == tmp_path / "work"
    assert resolve_output_root(None, {}) == tmp_path / "perfsight_data"


def test_analyse_without_a_start_is_a_clear_error(tmp_path):
    prof = perfsight.Profiler(output_path=tmp_path, start_profile=False)
    with pytest.raises(perfsight.PerfsightError, match="never started"):
        prof.analyse()
