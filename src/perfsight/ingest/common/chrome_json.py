"""Decoding one Kineto (Chrome-trace JSON) file as a stream of typed event batches, numbers kept as text.

Owns: reading plain or gzip bytes piece by piece (salvaging a broken gzip stream; gunzipped by ISA-L,
python-isal's zlib-compatible decompressor, about twice zlib's speed), the msgspec Structs
that describe a trace event and the trace header, and framing: cutting the ``traceEvents`` array into
batches of complete events, each decoded with one msgspec call, so the whole document and one Python
object per event never exist at once. JSON floats are decoded to their exact text (``ts`` and
``dur`` are microseconds with nanosecond decimals, beyond float64 precision at epoch magnitudes) and
``args`` to ``msgspec.Raw``, a view of its JSON text kept verbatim.

A corrupt stretch inside the events array is skipped up to the next event (the text after a ``}`` and a
comma that starts with ``{``), and reading goes on from there; a truncated file yields the events before
the cut. An element of the array that is not an object, or is nested too deeply for msgspec, is skipped
and counted; so is an event longer than ``MAX_EVENT_BYTES``. What was skipped goes to ``warnings``. A file
that is not a trace at all raises InputError.

Memory stays bounded however the text inflates: whitespace between events is dropped as it arrives, text
is held only up to ``MAX_EVENT_BYTES`` past the last complete event, and a gzip file may inflate to at most
``inflated_limit`` bytes of JSON text (a ratio to its size, capped by the memory available; the
environment variable named by ``MAX_INFLATED_ENV`` sets another), beyond which it raises InputError.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import msgspec
from isal import isal_zlib

from perfsight.core.errors import InputError, OptionError
from perfsight.core.files import open_regular
from perfsight.ingest.common import progress

ABSENT = msgspec.Raw(b"")
EMPTY_OBJECT = msgspec.Raw(b"{}")

EXPECTED = 'a Chrome-trace JSON object with "traceEvents" or a JSON list of trace events'
PIECE_BYTES = 1 << 18  # size of the pieces read (and gunzipped) at a time
BATCH_BYTES = 1 << 20  # JSON text decoded per msgspec call (smaller is leaner; 1 MiB is as fast)
MAX_CUT_ATTEMPTS = 16  # candidate cut points tried before waiting for more text
MAX_DAMAGE_WARNINGS = 10  # damaged stretches described one by one; the rest are counted in one warning
MAX_EVENT_BYTES = 16 << 20  # the longest event (or text before the events) held; the public traces: 7 kB
MAX_INFLATED_ENV = "PERFSIGHT_MAX_INFLATED_MB"  # the most JSON text (MB) a gzip file may inflate to
INFLATION_RATIO = 100  # default limit: times the gzip file's size (the public traces inflate 1.2-30x)
MIN_INFLATED_LIMIT = 64 << 20  # the default limit is never lower (small hand-made traces compress well)
MB = 1 << 20
NOT_OBJECTS = "elements of traceEvents that are not event objects"
TOO_DEEP = "elements of traceEvents nested too deeply to decode (past Python's recursion limit)"
#: the trace keys where Kineto writes the lines it logged while tracing, by level (libkineto's LoggerCollector:
#: "Record counts: Out-of-range = ..., CUPTI stopped early? = 0" at INFO, lost records at WARNING)
PROFILER_LOG_LEVELS = ("INFO", "WARNING", "ERROR")
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"


class Damage(str):
    """A parse warning that says the input was damaged and read around (cut, malformed, a broken gzip stream):
    the rank's data is incomplete, not only noted. Readers list these in meta ``damage`` too."""


class Event(msgspec.Struct, gc=False):
    """One trace event. Floats arrive as their exact text (``float_hook=str``); ``args`` as raw JSON text.

    Fields are untyped so that no value of an unexpected type can fail a whole batch; the column
    builders check types.
    """

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: msgspec.Raw = EMPTY_OBJECT


class _Header(msgspec.Struct, gc=False):
    """The trace object's keys other than the events (which the header text holds as ``[]``)."""

    traceEvents: Any = None  # noqa: N815 (the format's keys)
    baseTimeNanoseconds: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    deviceProperties: msgspec.Raw = ABSENT  # noqa: N815
    INFO: Any = None  # Kineto's own log lines of the trace, by level (its LoggerCollector)
    WARNING: Any = None
    ERROR: Any = None


_EVENTS_DECODER = msgspec.json.Decoder(list[Event], float_hook=str)
_EVENT_DECODER = msgspec.json.Decoder(Event, float_hook=str)
_VALUE_DECODER = msgspec.json.Decoder(msgspec.Raw)  # finds where a JSON value ends (at the text after it)
_HEADER_DECODER = msgspec.json.Decoder(_Header)
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_THEN_COMMA = re.compile(rb"\}\s*,")
_KINETO_HEADER_KEY = re.compile(rb'\s*\{\s*"(schemaVersion|deviceProperties|distributedInfo|traceEvents)"')
_ERROR_OFFSET = re.compile(r"\(byte (\d+)\)")
_NEXT_EVENT = re.compile(rb"\}\s*,\s*(?=\{)")  # the end of an event and the comma before the next one
_JSON_SPACE = re.compile(rb"[ \t\n\r]*")
_NESTING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]+|[\]}]+')  # strings (skipped), runs of brackets
_JSON_KINDS = {b"[": "a list", b'"': "a string", b"n": "null", b"t": "true", b"f": "false"}


class _Damaged(Exception):
    """Damage inside the events text: the events decoded before it and the text from the damage on."""

    def __init__(self, events: list, after: bytes, why: str = "malformed JSON after"):
        super().__init__()
        self.events, self.after, self.why = events, after, why


class TraceStream:
    """The events of one trace file, batch by batch; header facts are complete once iteration ends."""

    def __init__(self, path: Path, batch_bytes: int = BATCH_BYTES, piece_bytes: int = PIECE_BYTES,
                 max_event_bytes: int = MAX_EVENT_BYTES):
        self.path = path
        self.batch_bytes = batch_bytes
        self.piece_bytes = piece_bytes
        self.max_event_bytes = max_event_bytes
        self.base_time_ns: int | None = None
        self.distributed_info: dict | None = None
        self.device_properties: str | None = None  # JSON text, verbatim
        self.profiler_log: dict[str, list[str]] = {}  # Kineto's log lines by level (PROFILER_LOG_LEVELS)
        self.warnings: list[str] = []
        self._offset = 0  # file offset (in the JSON text) of the first byte not yet decoded
        self._damages = 0  # damaged stretches skipped so far
        self._events = 0  # events yielded so far
        self._skipped: dict[str, list] = {}  # NOT_OBJECTS/TOO_DEEP -> [count, what the first was, its offset]
        self._counted_to = -1  # offset of the last element counted in _skipped (text is decoded more than once)

    def batches(self) -> Iterator[list[Event]]:
        pieces = json_pieces(self.path, self.warnings, self.piece_bytes)
        start = self._read_head(pieces)
        if start is None:
            return
        head, buffer = start
        pending, size, due = [buffer], len(buffer), self.batch_bytes
        too_long = f"an event longer than {self.max_event_bytes // MB} MB at"
        for piece in pieces:
            pending.append(piece)
            size += len(piece)
            if size < due:
                continue
            buffer = b"".join(pending)
            try:
                events, rest = self._complete_events(buffer)
                if not events and len(rest) > self.max_event_bytes:
                    raise _Damaged(*self._valid_prefix(rest), why=too_long)
            except _Damaged as damage:
                yield self._counted(damage.events)
                resumed = self._resume(damage.after, pieces, damage.why)
                if resumed is None:  # no event after the damage
                    self._read_header(head, b"}")
                    self._report_skipped()
                    return
                pending, size, due = [resumed], len(resumed), self.batch_bytes
                continue
            complete = bool(events)       # before the yield: the caller may empty the list it is given
            if complete:
                yield self._counted(events)
            rest = self._without_leading_space(rest)
            # No complete event yet (one huge event?): wait until the text doubles, so work stays linear.
            pending, size = [rest], len(rest)
            due = self.batch_bytes if complete else min(2 * size, self.max_event_bytes + 1)
        yield self._counted(self._last_events(head, b"".join(pending)))
        self._report_skipped()

    def _counted(self, events: list[Event]) -> list[Event]:
        self._events += len(events)
        return events

    def _without_leading_space(self, text: bytes) -> bytes:
        """``text`` (which starts between two events) without its leading whitespace, however long."""
        kept = text.lstrip()
        self._offset += len(text) - len(kept)
        return kept

    # --- the head: everything before the first event ---------------------------------------------------

    def _read_head(self, pieces: Iterator[bytes]) -> tuple[bytes | None, bytes] | None:
        """(text before the events array, or None for a top-level list; text after its ``[``).

        None if the file ends before the events array starts.
        """
        text = b""
        for piece in pieces:
            text = self._without_leading_space(text + piece)
            if text.startswith(b"["):
                self._offset += 1
                return None, text[1:]
            if text and not text.startswith(b"{"):
                raise InputError(f"{self.path}: not JSON; expected {EXPECTED}")
            found = _EVENTS_KEY.search(text)
            if found:
                self._offset += found.end()
                return text[:found.end() - 1], text[found.end():]
            if len(text) > self.max_event_bytes:
                raise InputError(f"{self.path}: no events array in the first {self.max_event_bytes // MB} MB of "
                                 f"JSON text; expected {EXPECTED}")
        self._no_events_array(text)
        return None

    def _no_events_array(self, text: bytes) -> None:
        """Raise InputError, unless ``text`` is a Kineto trace cut before its events (then warn)."""
        if not text.strip():
            raise InputError(f"{self.path}: empty file; expected {EXPECTED}")
        try:
            msgspec.json.decode(text)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
            if not _KINETO_HEADER_KEY.match(text):
                raise InputError(f"{self.path}: malformed JSON ({error}); expected {EXPECTED}") from None
            self.warnings.append(Damage(f"{self.path.name}: {error} before the events; no events read"))
            return None
        raise InputError(f'{self.path}: a JSON object without "traceEvents"; expected {EXPECTED}')

    # --- the body: batches of complete events ------------------------------------------------------------

    def _complete_events(self, buffer: bytes) -> tuple[list[Event], bytes]:
        """Decode the complete events at the start of ``buffer``: (events, the rest); _Damaged if damaged.

        Cuts after the last ``}`` followed by a comma. A cut inside a nested value or a string fails at the
        cut, and the previous candidate is tried; a failure before the cut is damage in the text. (A cut
        inside an object, after a nested object followed by more keys as Ascend writes ``"args": {...},
        "ph": "X"``, fails at the appended ``]``, which msgspec reports at that byte's own index.)
        """
        for attempt, cut in enumerate(_matches_from_end(buffer, b"}", _EVENT_THEN_COMMA)):
            if attempt == MAX_CUT_ATTEMPTS:
                break
            text = b"[" + buffer[:cut.start() + 1] + b"]"
            try:
                events = self._decode_events(text)
            except msgspec.DecodeError as error:
                offset = _error_offset(error)
                if offset is not None and offset < len(text) - 2:
                    raise _Damaged(*self._valid_prefix(buffer)) from None
                continue
            self._offset += cut.end()
            return events, buffer[cut.end():]
        return [], buffer  # no complete event yet: wait for more text

    def _last_events(self, head: bytes | None, buffer: bytes) -> list[Event]:
        """Decode the last events and the header keys after the array (msgspec locates its closing ``]``),
        reading on after each damaged stretch."""
        events: list[Event] = []
        while True:
            text = self._valid_utf8(b"[" + buffer)  # msgspec's error offsets below must refer to this text
            try:
                events += self._decode_events(text)
                tail = b""
                break
            except msgspec.DecodeError as error:
                end = _error_offset(error)
                if "trailing characters" in str(error) and end is not None:
                    events += self._decode_events(text[:end])
                    tail = text[end:]
                    break
            kept, after = self._valid_prefix(buffer)
            events += kept
            resumed = self._resume(after, iter(()))
            if resumed is None:
                self._read_header(head, b"}")
                return events
            buffer = resumed
        if not self._read_header(head, tail) and head is not None:
            self.warnings.append(f"{self.path.name}: could not read the trace keys after the events")
            self._read_header(head, b"}")
        return events

    def _valid_prefix(self, buffer: bytes) -> tuple[list[Event], bytes]:
        """The events before the first damage in ``buffer`` (a run of events after ``[``) and the text from
        the damage on (``self._offset`` moves past the events kept)."""
        try:
            self._decode_events(b"[" + buffer + b"]")
            stop = len(buffer)
        except msgspec.DecodeError as error:
            offset = _error_offset(error)
            stop = len(buffer) if offset is None else min(len(buffer), max(offset - 1, 0))
        for attempt, end in enumerate(_matches_from_end(buffer[:stop], b"}")):
            if attempt == MAX_CUT_ATTEMPTS:
                break
            try:
                events = self._decode_events(b"[" + buffer[:end.end()] + b"]")
            except msgspec.DecodeError:
                continue
            self._offset += end.end()
            return events, buffer[end.end():]
        return [], buffer

    def _resume(self, after: bytes, pieces: Iterator[bytes], why: str = "malformed JSON after") -> bytes | None:
        """The text from the first event after the damage at the start of ``after`` (reading more pieces
        while none starts); None if none does before the end of the file. Warns what was skipped, ``why``
        (which ends in a preposition before the damage's offset)."""
        at, skipped, text = self._offset, 0, after
        while (found := _NEXT_EVENT.search(text, 1)) is None:
            piece = next(pieces, None)
            if piece is None:
                self.warnings.append(Damage(f"{self.path.name}: truncated or malformed JSON after byte {at} of the "
                                            "JSON text; kept the events before it and skipped the rest of the file"))
                return None
            keep = text.rstrip()[-64:]  # a "}," that ends in this text and a "{" in the next piece still match
            skipped, text = skipped + len(text) - len(keep), keep + piece
        skipped += found.end()
        self._offset = at + skipped
        self._damages += 1
        if self._damages <= MAX_DAMAGE_WARNINGS:
            self.warnings.append(Damage(f"{self.path.name}: {why} byte {at} of the JSON text; skipped {skipped} "
                                        "bytes to the next event and read on"))
        return text[found.end():]

    def _report_skipped(self) -> None:
        """Warn what was skipped without a warning of its own; InputError if the array held nothing but
        elements that are not objects."""
        if self._damages > MAX_DAMAGE_WARNINGS:
            self.warnings.append(Damage(f"{self.path.name}: {self._damages - MAX_DAMAGE_WARNINGS} more damaged "
                                        "stretches skipped in the same way"))
        described = [f"{count} {why}, the first{what} at byte {offset} of the JSON text"
                     for why, (count, what, offset) in self._skipped.items()]
        if not self._events and not self._damages and list(self._skipped) == [NOT_OBJECTS]:
            raise InputError(f"{self.path}: no element of its events array is an event object ({described[0]}); "
                             f"expected {EXPECTED}")
        self.warnings += [f"{self.path.name}: skipped {text}, and read on" for text in described]

    def _decode_events(self, text: bytes) -> list[Event]:
        """The events of ``text``, ``[`` and the JSON text from ``self._offset`` on."""
        try:
            return _EVENTS_DECODER.decode(text)
        except UnicodeDecodeError:
            return self._decode_events(self._valid_utf8(text))
        except (msgspec.ValidationError, RecursionError):
            return self._decode_each(self._valid_utf8(text))

    def _decode_each(self, text: bytes) -> list[Event]:
        """``_decode_events`` one element at a time, skipping (and counting) the elements that are not objects
        and those nested too deeply for msgspec (whose end a scan of their brackets finds). Damage raises
        msgspec.DecodeError as decoding the whole array would, its offset a position in ``text``."""
        view, events = memoryview(text), []
        at = _after_space(text, 1)
        if text[at:at + 1] == b"]":
            return _after_array(text, at)
        while True:
            first = text[at:at + 1]
            try:
                end = at + _value_length(view[at:])
                if first == b"{":
                    events.append(_EVENT_DECODER.decode(view[at:end]))
                else:
                    self._skip(at, NOT_OBJECTS, f" ({_JSON_KINDS.get(first, 'a number')})")
            except RecursionError:
                nested_end = _nested_end(text, at)
                if nested_end is None:
                    raise msgspec.DecodeError("Input data was truncated") from None
                end = nested_end
                self._skip(at, TOO_DEEP, "" if first == b"{" else f" ({_JSON_KINDS[first]})")
            except msgspec.DecodeError as error:
                raise _moved(error, at) from None
            at = _after_space(text, end)
            separator = text[at:at + 1]
            if separator == b"]":
                _after_array(text, at)
                return events
            if separator != b",":
                raise msgspec.DecodeError("Input data was truncated" if at == len(text) else
                                          f"JSON is malformed: expected ',' or ']' (byte {at + 1})")
            at = _after_space(text, at + 1)

    def _skip(self, at: int, why: str, what: str) -> None:
        """Count the element at ``at`` of a text decoded by ``_decode_events`` as skipped, once however often
        that text is decoded."""
        offset = self._offset + at - 1
        if offset > self._counted_to:
            self._counted_to = offset
            self._skipped.setdefault(why, [0, what, offset])[0] += 1

    def _valid_utf8(self, text: bytes) -> bytes:
        """``text`` with invalid UTF-8 replaced by U+FFFD (warned about); as is when it is valid."""
        try:
            text.decode()
        except UnicodeDecodeError as error:
            self.warnings.append(f"{self.path.name}: invalid UTF-8 ({error.reason}) replaced by U+FFFD")
            return text.decode("utf-8", "replace").encode()
        return text

    # --- the header ----------------------------------------------------------------------------------------

    def _read_header(self, head: bytes | None, tail: bytes) -> bool:
        """Take the header facts from ``head + [] + tail``; False if that is not valid JSON."""
        if head is None:
            return not tail.strip()
        try:
            header = _HEADER_DECODER.decode(head + b"[]" + tail)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
            return False
        base = header.baseTimeNanoseconds
        if base is not None and type(base) is not int:
            self.warnings.append(f"{self.path.name}: ignored baseTimeNanoseconds {base!r} (not an integer)")
            base = None
        self.base_time_ns = base
        self.distributed_info = header.distributedInfo if isinstance(header.distributedInfo, dict) else None
        self.device_properties = bytes(header.deviceProperties).decode("utf-8", "replace") or None
        self.profiler_log = {level: [line for line in lines if isinstance(line, str)]
                             for level in PROFILER_LOG_LEVELS
                             if isinstance(lines := getattr(header, level), list) and lines}
        return True


def _matches_from_end(buffer: bytes, lead: bytes, pattern: re.Pattern | None = None) -> Iterator[re.Match]:
    """Matches of ``pattern`` (which starts with ``lead``; default: just ``lead``) from the end backwards."""
    pattern = pattern or re.compile(re.escape(lead))
    position = len(buffer)
    while (position := buffer.rfind(lead, 0, position)) >= 0:
        match = pattern.match(buffer, position)
        if match:
            yield match


def _value_length(view: memoryview) -> int:
    """The length of the JSON value at the start of ``view`` (msgspec says where the text after it begins)."""
    try:
        _VALUE_DECODER.decode(view)
    except msgspec.DecodeError as error:
        end = _error_offset(error)
        if "trailing characters" not in str(error) or end is None:
            raise
        return end
    return len(view)


def _after_space(text: bytes, at: int) -> int:
    """Where the JSON whitespace from ``text[at]`` on ends (``at`` when there is none)."""
    space = _JSON_SPACE.match(text, at)
    return space.end() if space else at


def _nested_end(text: bytes, at: int) -> int | None:
    """Where the object or list at ``text[at]`` ends, found by counting its brackets outside strings; None if
    it does not end in ``text``."""
    depth = 0
    for token in _NESTING.finditer(text, at):
        bracket = token[0][:1]
        if bracket in b"[{":
            depth += len(token[0])
        elif bracket in b"]}":
            if len(token[0]) >= depth:
                return token.start() + depth
            depth -= len(token[0])
    return None


def _after_array(text: bytes, close: int) -> list:
    """[] if only whitespace follows the ``]`` at ``close``; else msgspec's error for trailing characters."""
    after = _after_space(text, close + 1)
    if after < len(text):
        raise msgspec.DecodeError(f"JSON is malformed: trailing characters (byte {after + 1})")
    return []


def _moved(error: msgspec.DecodeError, by: int) -> msgspec.DecodeError:
    """``error`` with its byte offset moved ``by`` bytes on (for text decoded from that position)."""
    return msgspec.DecodeError(_ERROR_OFFSET.sub(lambda found: f"(byte {int(found[1]) + by})", str(error)))


def _error_offset(error: msgspec.DecodeError) -> int | None:
    """Index of the offending byte (msgspec reports the offset just past it)."""
    found = _ERROR_OFFSET.search(str(error))
    return int(found.group(1)) - 1 if found else None


# --- bytes ------------------------------------------------------------------------------------------------

def json_pieces(path: Path, warnings: list[str], piece_bytes: int = PIECE_BYTES) -> Iterator[bytes]:
    """The file's JSON text in pieces of about ``piece_bytes``, without a UTF-8 byte order mark; gunzipped
    if the file starts with the gzip magic (InputError past ``inflated_limit``)."""
    with open_regular(path) as file:
        first = _read(file, max(piece_bytes, len(GZIP_MAGIC)))
        if first.startswith(GZIP_MAGIC):
            limit = inflated_limit(os.fstat(file.fileno()).st_size)
            yield from _without_bom(_gunzipped(file, first, path, warnings, piece_bytes, limit))
            return
        yield from _without_bom(_plain(file, first, piece_bytes))


def inflated_limit(compressed_bytes: int) -> tuple[int, str]:
    """How much JSON text a gzip file of ``compressed_bytes`` may inflate to, and what set that limit: the
    environment variable ``MAX_INFLATED_ENV`` (MB), else ``INFLATION_RATIO`` times the file's size (at least
    ``MIN_INFLATED_LIMIT``) but no more than the memory available."""
    given = os.environ.get(MAX_INFLATED_ENV, "").strip()
    if given:
        if not given.isdecimal() or not int(given):
            raise OptionError(f"{MAX_INFLATED_ENV}={given!r}: expected a positive whole number of MB")
        return int(given) * MB, f"{MAX_INFLATED_ENV}={given}"
    import psutil

    by_size = max(INFLATION_RATIO * compressed_bytes, MIN_INFLATED_LIMIT)
    available = psutil.virtual_memory().available
    if available < by_size:
        return available, f"the {available // MB} MB of memory available"
    return by_size, f"{INFLATION_RATIO}x the file's size, at least {MIN_INFLATED_LIMIT // MB} MB"


def _read(file: BinaryIO, size: int) -> bytes:
    data = file.read(size)
    progress.advance(len(data))
    return data


def _plain(file: BinaryIO, first: bytes, piece_bytes: int) -> Iterator[bytes]:
    while first:
        yield first
        first = _read(file, piece_bytes)


def _without_bom(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """``pieces`` without the UTF-8 byte order mark some editors write at the start (JSON text has none)."""
    start = b""
    for piece in pieces:
        start += piece
        if len(start) >= len(UTF8_BOM):
            break
    if start.removeprefix(UTF8_BOM):
        yield start.removeprefix(UTF8_BOM)
    yield from pieces


def _gunzipped(file: BinaryIO, compressed: bytes, path: Path, warnings: list[str], piece_bytes: int,
               limit: tuple[int, str]) -> Iterator[bytes]:
    decompressor = isal_zlib.decompressobj(wbits=47)
    produced = 0
    while compressed:
        try:
            piece = decompressor.decompress(compressed, piece_bytes)
        except isal_zlib.error as error:  # type: ignore[misc]  # a class; isal's stub says an instance
            if not produced:
                raise InputError(f"{path}: not a readable gzip file ({error}); expected {EXPECTED}") from None
            warnings.append(Damage(f"{path.name}: gzip stream broken ({error}) after {produced} bytes of JSON text"))
            return
        produced += len(piece)
        if produced > limit[0]:
            raise InputError(f"{path}: inflates beyond {limit[0] // MB} MB of JSON text (limit: {limit[1]}; set "
                             f"{MAX_INFLATED_ENV} to a number of MB to raise it)")
        if piece:
            yield piece
        if decompressor.eof:
            compressed = decompressor.unused_data or _read(file, piece_bytes)
            if compressed:  # a further gzip member follows
                decompressor = isal_zlib.decompressobj(wbits=47)
        else:
            compressed = decompressor.unconsumed_tail or _read(file, piece_bytes)
    if not decompressor.eof:
        warnings.append(Damage(f"{path.name}: gzip stream truncated after {produced} bytes of JSON text"))
