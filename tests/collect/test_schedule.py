import pytest

pytest.importorskip("torch")
from torch.profiler import ProfilerAction as A  # noqa: E402

from perfsight.collect.schedule import make_schedule  # noqa: E402


def actions(schedule, n):
    return [schedule(i) for i in range(n)]


def test_range_with_warmup_records_only_the_range_and_saves_after_its_last_step():
    assert actions(make_schedule((3, 4), warmup_steps=1), 7) == [
        A.NONE, A.NONE, A.WARMUP, A.RECORD, A.RECORD_AND_SAVE, A.NONE, A.NONE]


def test_flush_every_saves_windows_inside_the_range():
    assert actions(make_schedule((2, 6), flush_every=2), 8) == [
        A.NONE, A.NONE, A.RECORD, A.RECORD_AND_SAVE, A.RECORD, A.RECORD_AND_SAVE, A.RECORD_AND_SAVE, A.NONE]


def test_without_range_every_step_records_and_flushes_periodically():
    assert actions(make_schedule(None), 3) == [A.RECORD] * 3
    assert actions(make_schedule(None, flush_every=3), 6) == [
        A.RECORD, A.RECORD, A.RECORD_AND_SAVE, A.RECORD, A.RECORD, A.RECORD_AND_SAVE]


def test_warmup_longer_than_the_start_is_clamped_at_step_zero():
    assert actions(make_schedule((1, 1), warmup_steps=5), 3) == [A.WARMUP, A.RECORD_AND_SAVE, A.NONE]
