"""The armed job's parts on planted data, without torch: the slow-step trigger against step times whose answer
is known, the start step a capture asks for, requests a rank cannot parse, the rolling steps file, the
requester's refusals, and an armed rank answering requests with a stand-in profiler (the e2e tests run the
real thing)."""
import fcntl
import json
import os
import socket
import time
from pathlib import Path

import pytest

from perfsight import options as options_mod
from perfsight.collect import capture as capture_mod
from perfsight.collect import livefiles
from perfsight.collect.ondemand import Armed, open_live_dir
from perfsight.collect.steps import StepRecorder
from perfsight.collect.trigger import SlowStepTrigger
from perfsight.core.errors import OutputError
from tests.waiting import wait_until

MS = 1_000_000


# --- the trigger ----------------------------------------------------------------------------------


def fired(trigger: SlowStepTrigger, times_ms: list[float]) -> list[int]:
    return [step for step, ms in enumerate(times_ms) if trigger.observe(step, int(ms * MS))]


def test_a_step_k_times_the_median_fires_after_the_warmup_and_the_window_fill():
    times = [500.0, 400.0] + [10.0] * 10 + [35.0] + [10.0] * 5 + [29.0]   # warm-up slow; 12: 3.5x; 18: 2.9x
    trigger = SlowStepTrigger(3.0, warmup=2, window=5, cooldown=0, most=10)
    assert fired(trigger, times) == [12]      # not 0-1 (warm-up, not in the median), not 18 (below 3x)


def test_the_median_is_of_the_recent_window_only():
    """Steps 6-8 fire while most of the last five steps are fast (median 10 ms); from step 9 on, three of the
    five are slow, the median is 40 ms and a step as slow as they is not 3x (no cool-down: no capture ran)."""
    times = [10.0] * 6 + [40.0] * 10
    trigger = SlowStepTrigger(3.0, warmup=0, window=5, cooldown=0, most=10)
    assert fired(trigger, times) == [6, 7, 8]


def test_cooldown_after_a_capture_and_at_most_this_many_captures():
    trigger = SlowStepTrigger(2.0, warmup=0, window=3, cooldown=4, most=2)
    assert fired(trigger, [10.0] * 3 + [30.0]) == [3]
    trigger.capture_ended(last_step=6)        # the capture profiled steps 4-6 (not observed): quiet to step 10
    later = dict(zip(range(7, 15), [10.0, 30.0, 10.0, 30.0, 10.0, 30.0, 10.0, 30.0]))
    fires = [step for step, ms in later.items() if trigger.observe(step, int(ms * MS))]
    assert fires == [12]                      # 8 and 10 in the cool-down; 14 beyond trigger_max (2)
    assert trigger.fired == 2


def test_a_firing_says_why():
    trigger = SlowStepTrigger(2.0, warmup=0, window=3, cooldown=0, most=1)
    for step in range(3):
        trigger.observe(step, 10 * MS)
    firing = trigger.observe(3, 25 * MS)
    assert firing.as_dict() == {"trigger": "slow_step", "factor": 2.0, "step": 3, "step_ns": 25 * MS,
                                "median_ns": 10 * MS, "reason": firing.reason}
    assert firing.reason == ("step 3 took 25.0 ms, 2.5 times the median 10.0 ms of the recent steps "
                             "(trigger slow_step:2)")


# --- the start step and the request -----------------------------------------------------------------


def status(rank, step, end_ns, step_ns, heartbeat_ns=0, state=livefiles.ARMED, host="elsewhere"):
    return livefiles.RankStatus(rank, state, 1, host, "job", step, end_ns, step_ns, heartbeat_ns, Path("x"))


def test_the_first_common_step_is_the_furthest_rank_reach_after_the_lead():
    now = 10_000 * MS
    ranks = [status(0, 100, now - 5 * MS, 20 * MS),      # in step 101; after 500 ms: 25 more steps done
             status(1, 99, now - 30 * MS, 20 * MS),       # a rank one step behind, its status older
             status(2, None, None, None)]                 # no step yet: its first step is 0
    # rank 0: 100 + 2 + floor(505 / 20) = 127; rank 1: 99 + 2 + floor(530 / 20) = 127; rank 2: 1
    assert livefiles.first_common_step(ranks, now, lead_s=0.5) == 127
    assert livefiles.first_common_step(ranks[:1], now, lead_s=0.0) == 102


@pytest.mark.parametrize("text, said", [
    ("not json", "request.json: not readable JSON"),
    ('{"id": "a"}', 'not a capture request (expected an object with "format": "perfsight-capture-request")'),
    ('{"format": "perfsight-capture-request", "id": "../x", "start_step": 3}',
     "id \"../x\" is not allowed; allowed: 1-64 letters, digits, '-' or '_'"),
    ('{"format": "perfsight-capture-request", "id": "a", "start_step": -1}',
     "start_step -1 is not allowed; allowed: an integer >= 0"),
    ('{"format": "perfsight-capture-request", "id": "a", "start_step": 4, "steps": 0}',
     "steps 0 is not allowed; allowed: an integer >= 1"),
    ('{"format": "perfsight-capture-request", "id": "a", "start_step": 4, "ranks": []}',
     "ranks [] is not allowed; allowed: null (every rank) or a non-empty list of ranks >= 0"),
    ('{"format": "perfsight-capture-request", "id": "a", "start_step": 4, "options": [1]}',
     "options [1] is not allowed; allowed: an object of profiling options"),
])
def test_a_request_that_cannot_be_parsed_says_what_is_wrong(text, said):
    with pytest.raises(livefiles.BadRequest) as caught:
        livefiles.parse_request(text)
    assert said in str(caught.value)


def test_a_request_round_trips():
    request = livefiles.Request("20261202-101010-abc123", 57, 3, (0, 1), {"with_stack": True}, 5, 42)
    assert livefiles.parse_request(json.dumps(request.as_dict())) == request


# --- the rolling steps file -----------------------------------------------------------------------


def test_the_steps_file_rolls_over_and_keeps_the_recent_steps_in_order(tmp_path):
    newer, older = livefiles.steps_paths(tmp_path, 0)
    recorder = StepRecorder(newer, first_step=5, rolling=(4, older))
    for _ in range(11):
        recorder.finish_step()
    recorder.close()
    steps = [row[0] for row in livefiles.read_steps(tmp_path, 0)]
    assert steps == [9, 10, 11, 12, 13, 14, 15]            # 5-8 rolled away; at most 2 x 4 lines kept
    assert len(newer.read_text().splitlines()) == 1 + 3 and len(older.read_text().splitlines()) == 1 + 4


# --- the requester's refusals -----------------------------------------------------------------------


def test_no_armed_job_no_live_folder(tmp_path):
    with pytest.raises(capture_mod.CaptureError, match="no armed job here"):
        capture_mod.capture(tmp_path)


def write_status(live: Path, rank: int, **changes):
    data = {"format": livefiles.STATUS_FORMAT, "rank": rank, "world_size": 2, "job": "j", "pid": os.getpid(),
            "host": socket.gethostname(), "state": livefiles.ARMED, "started_ns": 0,
            "heartbeat_ns": time.time_ns(), "step": 10, "step_end_ns": time.time_ns(), "step_ns": 10 * MS,
            "captures": [], **changes}
    livefiles.status_path(live, rank).write_text(json.dumps(data))


def test_capture_refuses_when_no_rank_is_alive_naming_each(tmp_path):
    live = open_live_dir(tmp_path)
    write_status(live, 0, state=livefiles.ENDED, step=99)
    write_status(live, 1, heartbeat_ns=time.time_ns() - int(60e9))
    with pytest.raises(capture_mod.CaptureError) as caught:
        capture_mod.capture(tmp_path)
    said = str(caught.value)
    assert "no armed job is running (rank 0: ended after step 99; rank 1: gone at step 10" in said


def test_capture_refuses_ranks_not_armed_and_a_rank_capturing(tmp_path):
    live = open_live_dir(tmp_path)
    write_status(live, 0)
    write_status(live, 1, state=livefiles.CAPTURING)
    with pytest.raises(capture_mod.CaptureError, match=r"rank 3 not armed \(armed: 0, 1\)"):
        capture_mod.capture(tmp_path, ranks=[0, 3])
    with pytest.raises(capture_mod.CaptureError, match="a capture is already running on rank 1"):
        capture_mod.capture(tmp_path)


def test_a_second_capture_at_once_is_refused_naming_the_first(tmp_path):
    live = open_live_dir(tmp_path)
    write_status(live, 0)
    held = os.open(live / livefiles.LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        os.write(held, b"4242")
        with pytest.raises(capture_mod.CaptureError, match=r"a capture is already running \(perfsight capture, "
                                                           r"pid 4242\)"):
            capture_mod.capture(tmp_path)
    finally:
        os.close(held)


def test_bad_capture_options_are_refused_before_asking(tmp_path):
    live = open_live_dir(tmp_path)
    write_status(live, 0)
    with pytest.raises(capture_mod.CaptureError, match="the capture's options: task_time: \"fast\" is not allowed"):
        capture_mod.capture(tmp_path, options={"task_time": "fast"})
    assert not (live / livefiles.REQUEST).exists()


def test_a_live_folder_perfsight_did_not_make_is_never_written(tmp_path):
    (tmp_path / "perfsight_live").mkdir()
    with pytest.raises(OutputError, match="is not a folder perfsight made"):
        open_live_dir(tmp_path)


# --- an armed rank with a stand-in profiler -----------------------------------------------------------


class StandIn:
    """A capture's profiler that records the steps it is given (a Profiler's interface, without torch)."""

    made: list["StandIn"] = []

    def __init__(self, options, first_step):
        self.options, self.first_step, self.steps, self.closed = options, first_step, 0, False
        self.run = None
        StandIn.made.append(self)

    def step(self):
        self.steps += 1

    def close(self):
        self.closed = True


@pytest.fixture
def armed(tmp_path):
    StandIn.made = []
    options = options_mod.resolve({"output": str(tmp_path), "on_demand": True, "with_stack": True,
                                   "data_process": False})
    rank = Armed(options, StandIn, environ={"RANK": "0", "WORLD_SIZE": "1"})
    rank.arm()
    yield rank
    rank.close()


def ask(live: Path, request_id: str, start: int, **fields) -> None:
    livefiles.write_request(live, livefiles.Request(request_id, start, fields.pop("steps", 2), None,
                                                    fields.pop("options", {})))


def test_an_armed_rank_captures_the_steps_asked_with_its_own_options_and_the_requests(armed, tmp_path):
    for _ in range(3):
        armed.step()                                        # steps 0-2 done, step 3 running
    ask(armed.live, "r1", start=6, steps=2, options={"profile_memory": True})
    answer = wait_until(lambda: livefiles.read_response(armed.live, "r1", 0), "the answer")
    assert answer["state"] == livefiles.ACCEPTED and (answer["start_step"], answer["last_step"]) == (6, 7)
    assert answer["folder"] == str(tmp_path / "capture_r1")
    for _ in range(3):
        armed.step()                                        # steps 3-5: the capture begins after step 5
    [profiler] = StandIn.made
    assert profiler.first_step == 6 and profiler.options.steps == (6, 7) and profiler.options.output == answer["folder"]
    assert profiler.options.with_stack and profiler.options.profile_memory and not profiler.options.on_demand
    armed.step()
    assert not profiler.closed
    armed.step()                                            # step 7 done: the capture ends
    assert profiler.steps == 2 and profiler.closed
    done = wait_until(lambda: (a := livefiles.read_response(armed.live, "r1", 0)) and a["state"] != "accepted" and a,
                    "the capture's end")
    assert done["state"] == livefiles.FAILED               # the stand-in wrote no run: it says so
    assert not armed.capturing


def test_an_armed_rank_refuses_what_it_cannot_take_and_trains_on(armed):
    (armed.live / livefiles.REQUEST).write_text("{broken")
    refused = wait_until(lambda: livefiles.read_response(armed.live, livefiles.UNREADABLE, 0), "the refusal")
    assert refused["state"] == livefiles.REFUSED and "cannot read the request: request.json: not readable JSON" \
        in refused["message"]
    ask(armed.live, "r2", start=50, options={"trigger": "slow_step:2"})
    refused = wait_until(lambda: livefiles.read_response(armed.live, "r2", 0), "the refusal")
    assert refused["state"] == livefiles.REFUSED and "trigger: not an option of a capture" in refused["message"]
    for _ in range(5):
        armed.step()
    ask(armed.live, "r3", start=2)
    missed = wait_until(lambda: livefiles.read_response(armed.live, "r3", 0), "the answer")
    assert missed["state"] == livefiles.MISSED and missed["step"] == 4     # its last finished step
    assert not StandIn.made                                 # nothing was captured, and steps go on
    armed.step()
    status = wait_until(lambda: [s for s in livefiles.read_statuses(armed.live) if s.step == 5], "the status")
    assert status[0].state == livefiles.ARMED


def test_a_withdrawn_request_is_not_captured(armed):
    ask(armed.live, "r4", start=5)
    wait_until(lambda: livefiles.read_response(armed.live, "r4", 0), "the answer")
    (armed.live / livefiles.REQUEST).unlink()
    wait_until(lambda: armed._capture is None, "the withdrawal")
    for _ in range(8):
        armed.step()
    assert not StandIn.made


def test_the_docs_list_each_arming_option_with_its_default():
    """docs/on-demand.md's option table against the option table itself (``describe``)."""
    docs = (Path(__file__).parents[2] / "docs" / "on-demand.md").read_text(encoding="utf-8")
    rows = {cells[1].strip("` "): cells[2].strip() for line in docs.splitlines()
            if line.startswith("| `") and len(cells := line.split("|")) > 3}
    described = {option["name"]: option["default"] for option in options_mod.describe()}
    names = ("on_demand", "capture_steps", "trigger", "trigger_warmup", "trigger_window", "trigger_cooldown",
             "trigger_max")
    for name in names:
        default = described[name]
        said = "unset" if default is None else str(default)
        assert rows[name] == said, f"docs/on-demand.md says {name}'s default is {rows[name]!r}, the code {said!r}"


def test_an_answer_the_full_disk_kept_from_being_written_is_written_at_a_later_heartbeat(armed, monkeypatch,
                                                                                          caplog):
    written = livefiles.write_response
    refusals = iter([OSError(28, "No space left on device")])

    def full_once(*args, **kwargs):
        error = next(refusals, None)
        if error is not None:
            raise error
        return written(*args, **kwargs)
    monkeypatch.setattr(livefiles, "write_response", full_once)
    ask(armed.live, "r5", start=50, options={"trigger": "slow_step:2"})     # refused: an answer to write
    refused = wait_until(lambda: livefiles.read_response(armed.live, "r5", 0), "the answer, at a later heartbeat")
    assert refused["state"] == livefiles.REFUSED and not armed._unsent
    assert "answering request r5 failed: [Errno 28] No space left on device" in caplog.text


def test_an_unwritten_answer_to_a_request_withdrawn_meanwhile_is_dropped(armed, monkeypatch):
    monkeypatch.setattr(livefiles, "write_response", lambda *args, **kwargs: (_ for _ in ()).throw(OSError(28, "full")))
    ask(armed.live, "r6", start=50, options={"trigger": "slow_step:2"})
    wait_until(lambda: "r6" in armed._unsent, "the unwritten answer")
    (armed.live / livefiles.REQUEST).unlink()                              # the requester gave up
    wait_until(lambda: not armed._unsent, "the answer dropped")
