"""Iteration selection: step mode (model 4294967295), graph mode (torch.compile regions) and the errors."""
import pytest
from analysis.planted import BASE, CPU_COUNTER, MAIN, STREAM, compiled_run, training_run

from perfsight.core.errors import OptionError, PerfsightError
from perfsight.views.export import STEP_MODEL_ID, Selection, select


def ids(tables):
    return sorted(tables.slices["id"].to_pylist())


def test_no_selection_returns_the_tables_unchanged():
    tables = training_run()
    assert select(tables, Selection()) is tables


def test_step_mode_keeps_the_step_and_its_device_work():
    picked = select(training_run(), Selection(iteration_id=2, model_id=STEP_MODEL_ID))
    assert ids(picked) == [21, 22, 23, 24, 25, 26, 27, 28, 29]
    assert picked.flows.to_pylist() == [{"src_id": 26, "dst_id": 27, "kind": "launch"}]
    assert picked.counters["ts_ns"].to_pylist() == [BASE + 15000]      # inside step 2's span only
    assert picked.memory.num_rows == 0                                  # the sample is in step 1
    assert sorted(picked.tracks["track_id"].to_pylist()) == [MAIN, STREAM, CPU_COUNTER]  # autograd thread unused
    assert '"iteration_id": 2' in picked.meta_dict()["selection"]


def test_step_mode_count():
    picked = select(training_run(), Selection(iteration_id=1, model_id=STEP_MODEL_ID, iteration_count=2))
    assert len(ids(picked)) == training_run().slices.num_rows


def test_step_mode_unknown_iteration_lists_the_steps_present():
    with pytest.raises(OptionError,
                       match=r"select steps 3; not in this run: 3\. .*ProfilerStep#N; steps present: 1\.\.2"):
        select(training_run(), Selection(iteration_id=3, model_id=STEP_MODEL_ID))
    with pytest.raises(OptionError, match=r"select steps 2\.\.4; not in this run: 3\.\.4"):
        select(training_run(), Selection(iteration_id=2, model_id=STEP_MODEL_ID, iteration_count=3))


def test_graph_mode_nth_execution_of_a_compiled_frame():
    # frame 0 runs as 0/0 then (recompiled) 0/1: its 2nd iteration is the 0/1 region, with the kernel it
    # launched (which runs after the region ended) and the counters in that span
    picked = select(compiled_run(), Selection(iteration_id=2, model_id=0))
    assert ids(picked) == [7, 8, 9, 10]
    assert picked.flows.to_pylist() == [{"src_id": 9, "dst_id": 10, "kind": "launch"}]
    assert picked.counters["ts_ns"].to_pylist() == [BASE + 3500, BASE + 4200]


def test_graph_mode_other_model_and_count():
    assert ids(select(compiled_run(), Selection(iteration_id=1, model_id=1))) == [5, 6]
    assert ids(select(compiled_run(), Selection(iteration_id=1, model_id=0, iteration_count=2))) == [
        1, 2, 3, 4, 7, 8, 9, 10]


def test_graph_mode_unknown_model_or_iteration_lists_what_exists():
    with pytest.raises(OptionError, match=r"--model-id 5 is not in this run; graphs present: "
                                          r"model 0: iterations 1\.\.2; model 1: iterations 1\.\.1"):
        select(compiled_run(), Selection(iteration_id=1, model_id=5))
    with pytest.raises(OptionError, match=r"iterations 3 of model 0, which ran 2 time\(s\); graphs present: "
                                          r"model 0: iterations 1\.\.2"):
        select(compiled_run(), Selection(iteration_id=3, model_id=0))


def test_graph_mode_without_compiled_regions():
    with pytest.raises(OptionError, match="no compiled graphs"):
        select(training_run(), Selection(iteration_id=1, model_id=3))


@pytest.mark.parametrize("selection, message", [
    (Selection(iteration_id=1), "must be given together"),
    (Selection(model_id=STEP_MODEL_ID), "must be given together"),
    (Selection(iteration_count=2), "must be given together"),
    (Selection(iteration_id=0, model_id=STEP_MODEL_ID),
     "--iteration-id: 0 is not allowed; it must be a positive integer"),
    (Selection(iteration_id=1, model_id=-1), "--model-id: -1 is not allowed"),
    (Selection(iteration_id=1, model_id=STEP_MODEL_ID, iteration_count=0), "--iteration-count: 0 is not allowed"),
    (Selection(iteration_id=True, model_id=STEP_MODEL_ID), "--iteration-id: True is not allowed"),
])
def test_invalid_selections(selection, message):
    with pytest.raises(PerfsightError, match=message):
        select(training_run(), selection)
