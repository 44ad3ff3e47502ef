"""step_trace on the planted training run: every boundary and duration is known exactly."""
import pyarrow as pa

from perfsight.analysis.steps import STEP_PHASES, STEP_TRACE, step_phases, step_trace
from perfsight.core.tables import RunTables

from .planted import BASE, training_run


def test_automatic_fp_bp_per_step():
    rows = step_trace(training_run()).to_pylist()
    assert rows == [
        # step 1: fp = aten::linear after the dataloader; bp = end of the autograd thread's backward
        # before Optimizer.step; gap from the step start
        {"rank": 0, "step": 1, "start_ns": BASE, "end_ns": BASE + 10000, "fp_start_ns": BASE + 1500,
         "bp_end_ns": BASE + 6000, "iteration_ns": 10000, "fp_bp_ns": 4500, "gap_ns": 1500, "tail_ns": 4000,
         "data_wait_ns": 1000},
        # step 2: aten::zero_ inside Optimizer.zero_grad is not the forward start; no optimizer step, so the
        # backward ends before the last all-reduce
        {"rank": 0, "step": 2, "start_ns": BASE + 10000, "end_ns": BASE + 20000, "fp_start_ns": BASE + 11000,
         "bp_end_ns": BASE + 16000, "iteration_ns": 10000, "fp_bp_ns": 5000, "gap_ns": 1000, "tail_ns": 4000,
         "data_wait_ns": 500},
    ]


def test_named_fp_and_bp_points():
    table = step_trace(training_run(), fp_point="aten::relu", bp_point="aten::mm")
    step1, step2 = table.to_pylist()
    assert (step1["fp_start_ns"], step1["bp_end_ns"], step1["fp_bp_ns"]) == (BASE + 3200, BASE + 5800, 2600)
    assert (step1["gap_ns"], step1["tail_ns"]) == (3200, 4200)
    # neither name occurs in step 2: nothing is guessed
    assert step2["fp_start_ns"] is None and step2["bp_end_ns"] is None and step2["data_wait_ns"] == 500


def test_no_steps_gives_empty_table_with_columns():
    table = step_trace(RunTables())
    assert table.num_rows == 0 and table.schema == STEP_TRACE


def test_schema_is_int64_ns():
    table = step_trace(training_run())
    assert table.schema == STEP_TRACE
    assert all(table.schema.field(c).type == pa.int64() for c in STEP_TRACE.names if c.endswith("_ns"))


def test_step_phases_per_step_and_average_first():
    rows = step_phases(step_trace(training_run())).to_pylist()
    assert rows == [
        {"rank": 0, "step": None, "steps": 2, "iteration_ns": 10000, "gap_ns": 1250, "fp_bp_ns": 4750, "tail_ns": 4000,
         "data_wait_ns": 750, "fp_offset_ns": 1250, "bp_offset_ns": 6000},
        {"rank": 0, "step": 1, "steps": 1, "iteration_ns": 10000, "gap_ns": 1500, "fp_bp_ns": 4500, "tail_ns": 4000,
         "data_wait_ns": 1000, "fp_offset_ns": 1500, "bp_offset_ns": 6000},
        {"rank": 0, "step": 2, "steps": 1, "iteration_ns": 10000, "gap_ns": 1000, "fp_bp_ns": 5000, "tail_ns": 4000,
         "data_wait_ns": 500, "fp_offset_ns": 1000, "bp_offset_ns": 6000},
    ]


def test_step_phases_average_only_the_known_values():
    average = step_phases(step_trace(training_run(), fp_point="aten::relu", bp_point="aten::mm")).to_pylist()[0]
    # step 2 has neither point: the phase averages are step 1's, the step time and data wait both steps'
    assert (average["steps"], average["fp_offset_ns"], average["bp_offset_ns"], average["fp_bp_ns"]) == (
        2, 3200, 5800, 2600)
    assert (average["iteration_ns"], average["data_wait_ns"]) == (10000, 750)


def test_step_phases_of_no_steps():
    table = step_phases(step_trace(RunTables()))
    assert table.num_rows == 0 and table.schema == STEP_PHASES


def test_a_backward_op_running_past_the_step_end_counts_up_to_it():
    """The autograd thread's backward of step 1 is stretched past the step's end (10000): bp_end is the
    step end, the tail 0, never negative."""
    import dataclasses

    import pyarrow.compute as pc

    tables = training_run()
    slices = tables.slices
    stretched = pc.if_else(pc.equal(slices["id"], 11), pa.scalar(8000, pa.int64()), slices["dur_ns"])  # [4000, 12000)
    tables = dataclasses.replace(tables, slices=slices.set_column(slices.schema.get_field_index("dur_ns"), "dur_ns",
                                                                  stretched))
    step1 = step_trace(tables).to_pylist()[0]
    assert (step1["bp_end_ns"], step1["tail_ns"], step1["fp_bp_ns"]) == (BASE + 10000, 0, 8500)


def test_the_phases_add_up_to_the_step_when_torch_pauses_between_steps():
    """torch opens ProfilerStep#2 65 ns after closing #1 (its step() overhead): the pause belongs to no step,
    so step 2's gap starts at its own start and gap + fp_bp + tail = iteration (the gap reached back to step
    1's end, and the CLI's table did not add up)."""
    import dataclasses

    import pyarrow.compute as pc

    tables = training_run()
    slices = tables.slices
    later = pc.if_else(pc.greater_equal(slices["start_ns"], BASE + 10000), pc.add(slices["start_ns"], 65),
                       slices["start_ns"])
    tables = dataclasses.replace(tables, slices=slices.set_column(slices.schema.get_field_index("start_ns"),
                                                                  "start_ns", later))
    step1, step2 = step_trace(tables).to_pylist()
    assert (step2["start_ns"], step2["gap_ns"], step2["fp_bp_ns"], step2["tail_ns"]) == (BASE + 10065, 1000, 5000,
                                                                                         4000)
    assert all(r["gap_ns"] + r["fp_bp_ns"] + r["tail_ns"] == r["iteration_ns"] for r in (step1, step2))


def test_data_wait_is_the_union_of_the_loaders_inside_the_step():
    """Step 1's loader [100, 1100) plus one on the autograd thread [600, 1600) (overlapping it by 500) and one
    in step 2 that runs past its end [19500, 20700): each ns inside the step counts once."""
    from perfsight.analysis.data import data_wait

    from .planted import AUTOGRAD, LOADER, MAIN, TRACKS, _slice, tables_from_rows

    tables = training_run()
    extra = tables_from_rows(slices=[_slice(101, "dataloader", LOADER, AUTOGRAD, 600, 1600, 0, step=1),
                                     _slice(102, "dataloader", LOADER, MAIN, 19500, 20700, 1, parent=21, step=2)],
                             tracks=TRACKS)
    tables = RunTables(slices=pa.concat_tables([tables.slices, extra.slices]), tracks=tables.tracks)
    waits = [r["data_wait_ns"] for r in step_trace(tables).to_pylist()]
    assert waits == [1500, 500 + 500]                      # [100, 1600); [10100, 10600) + [19500, 20000)
    assert [r["dataloader_ns"] for r in data_wait(tables).to_pylist()] == waits
