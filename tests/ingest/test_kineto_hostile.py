"""Hostile inputs to the Kineto reader: gzip bombs, oversized events, deep nesting, elements that are not
objects, a byte order mark, and paths that are not regular files. Each is read around or refused with a
clear error, in bounded memory, without a hang."""
from __future__ import annotations

import gzip
import json
import os
import re
import threading
import tracemalloc
import zlib
from pathlib import Path

import pytest

from perfsight.core.errors import InputError, OptionError
from perfsight.ingest import find_runs
from perfsight.ingest.common import chrome_json as kineto_decode
from perfsight.ingest.common.chrome_json import MAX_INFLATED_ENV, TraceStream
from perfsight.ingest.kineto.reader import is_kineto_trace, read_kineto

MB = 1 << 20


def event(ts: int, name: str = "op") -> bytes:
    return b'{"ph": "X", "cat": "cpu_op", "name": "%s", "pid": 1, "tid": 1, "ts": %d, "dur": 1}' % (name.encode(), ts)


def gzip_with_filler(path: Path, before: bytes, filler: bytes, size: int, after: bytes) -> Path:
    """A gzip file of ``before``, ``size`` bytes of ``filler`` and ``after``, made without holding the filler."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = filler * MB
    with open(path, "wb") as file:
        file.write(compressor.compress(before))
        for _ in range(size // len(block)):
            file.write(compressor.compress(block))
        file.write(compressor.compress(after) + compressor.flush())
    return path


def whitespace_bomb(path: Path, size: int) -> Path:
    """Two events with ``size`` bytes of spaces between them."""
    return gzip_with_filler(path, b'{"traceEvents": [' + event(1) + b",", b" ", size, event(2) + b"]}")


def warnings(run) -> list[str]:
    return json.loads(run.meta_dict()["parse_warnings"])


def peak_bytes(work) -> tuple[object, int]:
    """``work()`` and the peak of the Python memory it allocated (bytes objects included)."""
    tracemalloc.start()
    try:
        return work(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- gzip bombs and oversized events (item 7) -----------------------------------------------------------

def test_a_gzip_file_inflating_past_the_limit_set_is_an_error_naming_the_limit(tmp_path, monkeypatch):
    bomb = whitespace_bomb(tmp_path / "bomb.pt.trace.json.gz", 6 * MB)
    monkeypatch.setenv(MAX_INFLATED_ENV, "4")
    with pytest.raises(InputError) as raised:
        read_kineto([bomb])
    assert str(raised.value) == (f"{bomb}: inflates beyond 4 MB of JSON text (limit: {MAX_INFLATED_ENV}=4; set "
                                 f"{MAX_INFLATED_ENV} to a number of MB to raise it)")
    monkeypatch.setenv(MAX_INFLATED_ENV, "7")
    assert read_kineto([bomb]).slices["start_ns"].to_pylist() == [1000, 2000]


def test_the_default_limit_is_a_ratio_to_the_file_size_and_stays_within_available_memory(tmp_path, monkeypatch):
    import psutil

    monkeypatch.delenv(MAX_INFLATED_ENV, raising=False)
    monkeypatch.setattr(kineto_decode, "MIN_INFLATED_LIMIT", MB)
    bomb = whitespace_bomb(tmp_path / "bomb.pt.trace.json.gz", 8 * MB)   # ~8 kB: 1000x
    ratio = kineto_decode.INFLATION_RATIO
    with pytest.raises(InputError, match=rf"inflates beyond \d+ MB of JSON text \(limit: {ratio}x the file's size, "
                                         rf"at least 1 MB; set {MAX_INFLATED_ENV} to a number of MB to raise it\)"):
        read_kineto([bomb])
    assert kineto_decode.inflated_limit(10 * MB)[0] == min(ratio * 10 * MB, psutil.virtual_memory().available)
    assert kineto_decode.inflated_limit(10)[0] == MB                      # never below the floor
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("Memory", (), {"available": 300 * MB}))
    assert kineto_decode.inflated_limit(10 * MB) == (300 * MB, "the 300 MB of memory available")


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1.5"])
def test_an_invalid_limit_is_an_option_error_naming_the_variable(tmp_path, monkeypatch, value):
    monkeypatch.setenv(MAX_INFLATED_ENV, value)
    with pytest.raises(OptionError, match=f"{MAX_INFLATED_ENV}='{value}': expected a positive whole number of MB"):
        read_kineto([whitespace_bomb(tmp_path / "t.pt.trace.json.gz", MB)])


def test_whitespace_between_events_is_read_in_bounded_memory(tmp_path, monkeypatch):
    """64 MB of spaces between two events: the reader holds about a batch of it, not all of it."""
    monkeypatch.setenv(MAX_INFLATED_ENV, "100")
    bomb = whitespace_bomb(tmp_path / "bomb.pt.trace.json.gz", 64 * MB)
    stream = TraceStream(bomb)
    events, peak = peak_bytes(lambda: [e.ts for batch in stream.batches() for e in batch])
    assert events == [1, 2] and stream.warnings == []
    assert peak < 8 * MB


def test_an_event_longer_than_the_limit_is_skipped_in_bounded_memory(tmp_path, monkeypatch):
    """A name of 24 MB: the event is skipped (with a warning giving its offset), the events around it read."""
    monkeypatch.setenv(MAX_INFLATED_ENV, "100")
    before = b'{"traceEvents": [' + event(1) + b', {"ph": "X", "name": "'
    path = gzip_with_filler(tmp_path / "t.pt.trace.json.gz", before, b"a", 24 * MB,
                            b'", "ts": 2, "dur": 1}, ' + event(3) + b"]}")
    stream = TraceStream(path, max_event_bytes=4 * MB)
    events, peak = peak_bytes(lambda: [e.ts for batch in stream.batches() for e in batch])
    assert events == [1, 3]
    assert stream.warnings == [f"t.pt.trace.json.gz: an event longer than 4 MB at byte {len(before) - 21} of the "
                               f"JSON text; skipped {24 * MB + 44} bytes to the next event and read on"]
    assert peak < 24 * MB


def test_text_before_the_events_longer_than_the_limit_is_an_error(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"schemaVersion": 1, "x": "' + b"a" * (2 * MB) + b'", "traceEvents": []}')
    with pytest.raises(InputError, match="no events array in the first 1 MB of JSON text"):
        list(TraceStream(path, max_event_bytes=MB).batches())


# --- deep nesting, elements that are not objects, a byte order mark (item 8) ------------------------------

def deep(levels: int) -> bytes:
    return b'{"a": ' * levels + b"1" + b"}" * levels


@pytest.mark.parametrize("batch_bytes", [kineto_decode.BATCH_BYTES, 256])
def test_an_event_nested_too_deeply_is_skipped_counted_and_the_rest_read(tmp_path, batch_bytes):
    """Args nested 5,000 levels (msgspec's limit is Python's recursion limit): that event is skipped, at the
    right offset; with small batches the damage falls in the middle of the stream, else in its last batch."""
    events = [event(ts) for ts in range(1, 40)]
    events[20] = b'{"ph": "X", "name": "deep", "ts": 99, "dur": 1, "args": ' + deep(5000) + b"}"
    text = b'{"traceEvents": [' + b", ".join(events) + b"]}"
    path = tmp_path / "t.json"
    path.write_bytes(text)
    stream = TraceStream(path, batch_bytes=batch_bytes, piece_bytes=128)
    assert [int(e.ts) for batch in stream.batches() for e in batch] == [ts for ts in range(1, 40) if ts != 21]
    assert stream.warnings == [f"t.json: skipped 1 elements of traceEvents nested too deeply to decode (past "
                               f"Python's recursion limit), the first at byte {text.index(events[20])} of the JSON "
                               "text, and read on"]


def test_a_deep_value_in_the_trace_keys_loses_only_those_keys(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [' + event(1) + b'], "distributedInfo": ' + deep(5000) + b"}")
    run = read_kineto([path])
    assert run.slices.num_rows == 1
    assert "t.json: could not read the trace keys after the events" in warnings(run)


@pytest.mark.parametrize("gzipped", [False, True])
def test_elements_that_are_not_objects_are_skipped_counted_and_the_rest_read(tmp_path, gzipped):
    elements = [event(1), b"42", b'"text"', b"null", b"[1, [2]]", b"true", event(2), b"-1.5e3", event(3)]
    text = b'{"traceEvents": [' + b", ".join(elements) + b"]}"
    path = tmp_path / ("t.json.gz" if gzipped else "t.json")
    path.write_bytes(gzip.compress(text) if gzipped else text)
    run = read_kineto([path])
    assert run.slices["start_ns"].to_pylist() == [1000, 2000, 3000]
    assert warnings(run) == [f"{path.name}: skipped 6 elements of traceEvents that are not event objects, the first "
                             f"(a number) at byte {text.index(b'42')} of the JSON text, and read on"]


def test_an_event_list_of_nothing_but_other_values_is_not_a_trace(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [null, "x"]}')
    with pytest.raises(InputError, match=r"no element of its events array is an event object \(2 elements of "
                                         r"traceEvents that are not event objects, the first \(null\) at byte 17"):
        read_kineto([path])


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_utf8_byte_order_mark_is_read_past(tmp_path, gzipped):
    text = b"\xef\xbb\xbf" + b'{"traceEvents": [' + event(1, "café") + b"]}"
    path = tmp_path / ("t.json.gz" if gzipped else "t.json")
    path.write_bytes(gzip.compress(text) if gzipped else text)
    assert is_kineto_trace(path)
    run = read_kineto([path])
    assert run.slices["name"].to_pylist() == ["café"] and warnings(run) == []


# --- paths that are not regular files (item 9) ----------------------------------------------------------

def test_a_fifo_or_a_device_is_refused_without_a_hang(tmp_path):
    fifo = tmp_path / "t.pt.trace.json"
    os.mkfifo(fifo)
    outcome = {}

    def read():
        try:
            read_kineto([fifo])
        except InputError as error:
            outcome["error"] = str(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():                                   # blocked in open(): release it
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(30)
        pytest.fail("reading a FIFO blocked")
    assert outcome["error"] == f"{fifo}: a FIFO (named pipe), not a regular file; perfsight reads only regular files"
    with pytest.raises(InputError, match="/dev/zero: a character device, not a regular file"):
        read_kineto([Path("/dev/zero")])


@pytest.mark.parametrize("make, kind", [(os.mkfifo, "a FIFO (named pipe)"),
                                        (lambda path: path.symlink_to("/dev/null"), "a character device")])
def test_find_runs_on_a_path_that_is_not_a_file_or_folder_says_what_it_is(tmp_path, make, kind):
    path = tmp_path / "t.pt.trace.json"
    make(path)
    with pytest.raises(InputError, match=re.escape(f"{path}: {kind}, not a file or directory; expected a PROF_ dir")):
        find_runs(path)
