"""The Kineto reader's parts on their own: nesting, classification, column builders."""
from __future__ import annotations

import msgspec
import numpy as np
import pytest

from perfsight.ingest.common.columns import int_column, micros_to_ns, raw_text_column, scalar_text
from perfsight.ingest.common.kinds import classify
from perfsight.ingest.common.nesting import Nesting, _nest, _stack_pass


def nesting(*slices):
    """slices: (track, start, dur) tuples, in any order."""
    track, start, dur = (np.array(column, dtype=np.int64) for column in zip(*slices))
    return Nesting(track, start, dur)


def test_parents_and_depths_in_any_row_order():
    #          0: child       1: root        2: grandchild   3: other track  4: back-to-back sibling
    result = nesting((0, 10, 5), (0, 0, 100), (0, 11, 2), (1, 11, 2), (0, 15, 5))
    assert result.parent.tolist() == [1, -1, 0, -1, 1]
    assert result.depth.tolist() == [1, 0, 2, 0, 1]
    assert result.overlaps == 0


def test_equal_intervals_nest_in_row_order():
    assert nesting((0, 5, 10), (0, 5, 10)).parent.tolist() == [-1, 0]


def test_partial_overlap_makes_siblings_and_is_counted():
    # 1 starts inside 0 and ends after it; 2 starts inside both and fits in 1 only
    result = nesting((0, 0, 10), (0, 5, 10), (0, 8, 6))
    assert result.parent.tolist() == [-1, -1, 1]
    assert result.depth.tolist() == [0, 0, 1]
    assert result.overlaps == 1


def test_enclosing_innermost_and_accepted():
    result = nesting((0, 0, 100), (0, 10, 20), (0, 12, 5), (0, 40, 0))
    points = np.array([11, 13, 17, 30, 40, 100, 5], dtype=np.int64)
    tracks = np.array([0, 0, 0, 0, 0, 0, 1], dtype=np.int64)
    assert result.enclosing(tracks, points).tolist() == [1, 2, 1, 0, 3, -1, -1]
    accept = np.array([True, True, False, False])
    assert result.enclosing(tracks, points, accept).tolist() == [1, 1, 1, 0, 0, -1, -1]


def test_no_slices():
    result = nesting((0, 0, 0))
    assert result.enclosing(np.array([0]), np.array([0])).tolist() == [0]  # a zero-duration slice's instant
    empty = Nesting(*(np.array([], dtype=np.int64),) * 3)
    assert empty.parent.tolist() == [] and empty.enclosing(np.array([0]), np.array([5])).tolist() == [-1]


def _random_tracks(seed: int, crossing: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted (track, start, end) of random nested slices: children inside parents, back-to-back and equal
    intervals, zero durations at a parent's start and end; with ``crossing``, some slices of tracks 1 and 3 outlive
    their parent (the other tracks still nest)."""
    rng = np.random.default_rng(seed)
    rows = []
    for track in range(4):
        cap = len(rows) + 1000

        def fill(lo, hi, level):
            t = lo
            while t < hi and len(rows) < cap:
                if rng.random() < 0.1:                      # an instant (zero-duration) slice
                    rows.append((track, t, t))
                    continue
                length = int(rng.integers(0, max(1, hi - t) + 1))
                end = t + length
                if crossing and track % 2 and level and rng.random() < 0.2:  # tracks 1, 3 only
                    end = hi + int(rng.integers(1, 5))      # outlives its parent
                rows.append((track, t, end))
                if rng.random() < 0.1:
                    rows.append((track, t, end))            # an equal twin
                if level < 6 and end - t > 2:
                    fill(t, min(end, hi), level + 1)
                t = end + int(rng.integers(0, 3))           # back to back or a gap
        fill(0, 10_000, 0)
    track, start, end = (np.array(column, dtype=np.int64) for column in zip(*rows))
    order = np.lexsort((np.arange(len(track)), start - end, start, track))
    return track[order], start[order], end[order]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("crossing", [False, True])
def test_nesting_without_the_stack_matches_the_stack_pass(seed, crossing):
    track, start, end = _random_tracks(seed, crossing)
    parent, depth, overlaps = _nest(track, start, end)
    expected_parent, expected_depth, expected_overlaps = _stack_pass(track, start, end)
    assert parent.tolist() == expected_parent.tolist()
    assert depth.tolist() == expected_depth.tolist()
    assert overlaps == expected_overlaps and (overlaps > 0) == crossing
    assert depth.max() >= 4


def test_deep_staircase_nests_in_one_pass():
    # 20,000 slices each inside the previous one: depth 0..19,999, parents the previous row
    n = 20_000
    result = nesting(*((0, i, 2 * (n - i)) for i in range(n)))
    assert result.depth.tolist() == list(range(n))
    assert result.parent.tolist() == [-1] + list(range(n - 1))
    assert result.overlaps == 0


@pytest.mark.parametrize("category, name, kind, task_type, step", [
    ("cpu_op", "aten::mm", "cpu_op", None, None),
    ("Operator", "ProfilerStep#12", "step", None, 12),  # 2021 format
    ("user_annotation", "ProfilerStep#3", "step", None, 3),
    ("user_annotation", "## DataLoader next ##", "dataloader", None, None),
    ("user_annotation", "nccl:all_reduce", "comm", None, None),
    ("cpu_op", "record_param_comms", "comm", None, None),
    ("cpu_op", "c10d::allreduce_", "comm", None, None),
    ("python_function", "enumerate(DataLoader)#x", "python", None, None),  # Python frames keep their kind
    ("kernel", "ncclDevKernel_AllGather_RING_LL", "comm", "COMM", None),
    ("Kernel", "rcclKernel", "comm", "COMM", None),
    ("kernel", "volta_sgemm_128x64_nn", "kernel", "KERNEL", None),
    ("Memcpy", "Memcpy HtoD (Pageable -> Device)", "memcpy", "MEMCPY", None),
    ("gpu_memset", "Memset (Device)", "memset", "MEMSET", None),
    ("cuda_runtime", "hipLaunchKernel", "runtime", None, None),
    ("cuda_runtime", "cudaStreamSynchronize", "sync", None, None),
    ("cuda_driver", "cuLaunchKernel", "driver", None, None),
    ("cuda_sync", "Stream Sync", "sync", None, None),
    ("gpu_user_annotation", "nccl:all_reduce", "gpu_annotation", None, None),
    ("cuda_profiler_range", "some_kernel", "other", None, None),
    ("collective_comm", "all_reduce", "comm", None, None),
    ("Trace", "PyTorch Profiler (0)", "other", None, None),
    (None, "uncategorised", "other", None, None),
])
def test_classify(category, name, kind, task_type, step):
    result = classify(category, name)
    assert (result.kind, result.task_type, result.step) == (kind, task_type, step)


def test_raw_text_column_keeps_text_and_nulls_empty():
    raws = msgspec.json.decode(b'[{"a": [1, 2]}, "x", 1.50]', type=list[msgspec.Raw]) + [msgspec.Raw(b"")]
    assert raw_text_column(raws).to_pylist() == ['{"a": [1, 2]}', '"x"', "1.50", None]
    assert raw_text_column([b'"\xff"']).to_pylist() == ['"\ufffd"']


def test_scalar_text_of_mixed_values():
    assert scalar_text([7, "stream 7", None, "1.5"]).to_pylist() == ["7", "stream 7", None, "1.5"]
    assert scalar_text([1, 2]).to_pylist() == ["1", "2"]


def test_micros_to_ns_is_exact_and_counts_non_numbers():
    column, invalid = micros_to_ns(["4441817884623.376", "1736413971558972.912", None, "soon", "-0.5"])
    assert column.to_pylist() == [4441817884623376, 1736413971558972912, None, None, -500]
    assert invalid == 1
    assert micros_to_ns([10**17, 3])[0].to_pylist() == [None, 3000]  # beyond int64 ns


def test_int_column_never_truncates_floats():
    column, invalid = int_column([1, 2.0, 2.5, "3", True, 2**70, None])
    assert column.to_pylist() == [1, 2, None, None, None, None, None]
    assert invalid == 4


def test_batch_cuts_never_change_the_events(write_trace):
    from perfsight.ingest.common.chrome_json import TraceStream

    tricky = [{"ph": "X", "name": f"op}}, {{{i}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": i, "dur": 1,
               "args": {"groups": [{"ranks": [0, 1]}, {"ranks": [2, 3]}], "note": "}, {"}} for i in range(50)]
    path = write_trace(tricky, name="tricky.json.gz", traceName="after the events", baseTimeNanoseconds=5)

    def decoded(batch_bytes):
        stream = TraceStream(path, batch_bytes=batch_bytes, piece_bytes=max(1, batch_bytes // 3))
        events = [(e.name, e.ts, bytes(e.args)) for batch in stream.batches() for e in batch]
        return events, stream.base_time_ns, stream.warnings

    whole = decoded(1 << 30)
    assert len(whole[0]) == 50 and whole[1:] == (5, [])
    for batch_bytes in (1, 97, 400, 1000):
        assert decoded(batch_bytes) == whole


def test_a_reader_that_empties_each_batch_still_gets_batches_of_batch_bytes(write_trace):
    """event_tables empties each batch it is given once split: the next batch must not be cut short for it
    (batches four times smaller made reading the shared NCCL trace ~3.5x as many batches)."""
    from perfsight.ingest.common.chrome_json import TraceStream

    events = [{"ph": "X", "name": f"op{i}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": i, "dur": 1, "args": {}}
              for i in range(2000)]
    path = write_trace(events)

    def sizes(empty: bool) -> list[int]:
        sizes = []
        for batch in TraceStream(path, batch_bytes=20_000, piece_bytes=1000).batches():
            sizes.append(len(batch))
            if empty:
                batch.clear()
        return sizes

    kept = sizes(empty=False)
    assert sum(kept) == 2000 and len(kept) < 20
    assert sizes(empty=True) == kept
