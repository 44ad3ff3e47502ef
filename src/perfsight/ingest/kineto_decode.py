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
the cut. What was skipped goes to ``warnings``. A file that is not a trace at all raises InputError.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import msgspec
from isal import isal_zlib

from perfsight.errors import InputError
from perfsight.ingest import progress

ABSENT = msgspec.Raw(b"")
EMPTY_OBJECT = msgspec.Raw(b"{}")

EXPECTED = 'a Chrome-trace JSON object with "traceEvents" or a JSON list of trace events'
PIECE_BYTES = 1 << 18  # size of the pieces read (and gunzipped) at a time
BATCH_BYTES = 1 << 20  # JSON text decoded per msgspec call (smaller is leaner; 1 MiB is as fast)
MAX_CUT_ATTEMPTS = 16  # candidate cut points tried before waiting for more text
MAX_DAMAGE_WARNINGS = 10  # damaged stretches described one by one; the rest are counted in one warning


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


_EVENTS_DECODER = msgspec.json.Decoder(list[Event], float_hook=str)
_HEADER_DECODER = msgspec.json.Decoder(_Header)
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_THEN_COMMA = re.compile(rb"\}\s*,")
_KINETO_HEADER_KEY = re.compile(rb'\s*\{\s*"(schemaVersion|deviceProperties|distributedInfo|traceEvents)"')
_ERROR_OFFSET = re.compile(r"\(byte (\d+)\)")
_NEXT_EVENT = re.compile(rb"\}\s*,\s*(?=\{)")  # the end of an event and the comma before the next one


class _Damaged(Exception):
    """Damage inside the events text: the events decoded before it and the text from the damage on."""

    def __init__(self, events: list, after: bytes):
        super().__init__()
        self.events, self.after = events, after


class TraceStream:
    """The events of one trace file, batch by batch; header facts are complete once iteration ends."""

    def __init__(self, path: Path, batch_bytes: int = BATCH_BYTES, piece_bytes: int = PIECE_BYTES):
        self.path = path
        self.batch_bytes = batch_bytes
        self.piece_bytes = piece_bytes
        self.base_time_ns: int | None = None
        self.distributed_info: dict | None = None
        self.device_properties: str | None = None  # JSON text, verbatim
        self.warnings: list[str] = []
        self._offset = 0  # file offset (in the JSON text) of the first byte not yet decoded
        self._damages = 0  # damaged stretches skipped so far

    def batches(self) -> Iterator[list[Event]]:
        pieces = json_pieces(self.path, self.warnings, self.piece_bytes)
        start = self._read_head(pieces)
        if start is None:
            return
        head, buffer = start
        pending, size, due = [buffer], len(buffer), self.batch_bytes
        for piece in pieces:
            pending.append(piece)
            size += len(piece)
            if size < due:
                continue
            buffer = b"".join(pending)
            try:
                events, rest = self._complete_events(buffer)
            except _Damaged as damage:
                yield damage.events
                rest = self._resume(damage.after, pieces)
                if rest is None:  # no event after the damage
                    self._read_header(head, b"}")
                    self._count_damages()
                    return
                pending, size, due = [rest], len(rest), self.batch_bytes
                continue
            if events:
                yield events
            # No complete event yet (one huge event?): wait until the text doubles, so work stays linear.
            pending, size = [rest], len(rest)
            due = self.batch_bytes if events else 2 * size
        yield self._last_events(head, b"".join(pending))
        self._count_damages()

    # --- the head: everything before the first event ---------------------------------------------------

    def _read_head(self, pieces: Iterator[bytes]) -> tuple[bytes | None, bytes] | None:
        """(text before the events array, or None for a top-level list; text after its ``[``).

        None if the file ends before the events array starts.
        """
        text = b""
        for piece in pieces:
            text += piece
            stripped = text.lstrip()
            if stripped.startswith(b"["):
                head, self._offset = None, len(text) - len(stripped) + 1
                return head, text[self._offset:]
            if stripped and not stripped.startswith(b"{"):
                raise InputError(f"{self.path}: not JSON; expected {EXPECTED}")
            found = _EVENTS_KEY.search(text)
            if found:
                self._offset = found.end()
                return text[:found.end() - 1], text[found.end():]
        return self._no_events_array(text)

    def _no_events_array(self, text: bytes) -> None:
        """Raise InputError, unless ``text`` is a Kineto trace cut before its events (then warn)."""
        if not text.strip():
            raise InputError(f"{self.path}: empty file; expected {EXPECTED}")
        try:
            msgspec.json.decode(text)
        except (msgspec.DecodeError, UnicodeDecodeError) as error:
            if not _KINETO_HEADER_KEY.match(text):
                raise InputError(f"{self.path}: malformed JSON ({error}); expected {EXPECTED}") from None
            self.warnings.append(f"{self.path.name}: {error} before the events; no events read")
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
            buffer = self._resume(after, iter(()))
            if buffer is None:
                self._read_header(head, b"}")
                return events
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

    def _resume(self, after: bytes, pieces: Iterator[bytes]) -> bytes | None:
        """The text from the first event after the damage at the start of ``after`` (reading more pieces
        while none starts); None if none does before the end of the file. Warns what was skipped."""
        at, skipped, text = self._offset, 0, after
        while (found := _NEXT_EVENT.search(text, 1)) is None:
            piece = next(pieces, None)
            if piece is None:
                self.warnings.append(f"{self.path.name}: truncated or malformed JSON after byte {at} of the JSON "
                                     f"text; kept the events before it and skipped the rest of the file")
                return None
            keep = text[-64:]  # a "}," that ends in this text and a "{" in the next piece still match
            skipped, text = skipped + len(text) - len(keep), keep + piece
        skipped += found.end()
        self._offset = at + skipped
        self._damages += 1
        if self._damages <= MAX_DAMAGE_WARNINGS:
            self.warnings.append(f"{self.path.name}: malformed JSON after byte {at} of the JSON text; skipped "
                                 f"{skipped} bytes to the next event and read on")
        return text[found.end():]

    def _count_damages(self) -> None:
        if self._damages > MAX_DAMAGE_WARNINGS:
            self.warnings.append(f"{self.path.name}: {self._damages - MAX_DAMAGE_WARNINGS} more damaged stretches "
                                 f"skipped in the same way")

    def _decode_events(self, text: bytes) -> list[Event]:
        try:
            return _EVENTS_DECODER.decode(text)
        except msgspec.ValidationError as error:
            raise InputError(f"{self.path}: {error}; expected {EXPECTED}") from None
        except UnicodeDecodeError:
            return self._decode_events(self._valid_utf8(text))

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
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            return False
        base = header.baseTimeNanoseconds
        if base is not None and type(base) is not int:
            self.warnings.append(f"{self.path.name}: ignored baseTimeNanoseconds {base!r} (not an integer)")
            base = None
        self.base_time_ns = base
        self.distributed_info = header.distributedInfo if isinstance(header.distributedInfo, dict) else None
        self.device_properties = bytes(header.deviceProperties).decode("utf-8", "replace") or None
        return True


def _matches_from_end(buffer: bytes, lead: bytes, pattern: re.Pattern | None = None) -> Iterator[re.Match]:
    """Matches of ``pattern`` (which starts with ``lead``; default: just ``lead``) from the end backwards."""
    pattern = pattern or re.compile(re.escape(lead))
    position = len(buffer)
    while (position := buffer.rfind(lead, 0, position)) >= 0:
        match = pattern.match(buffer, position)
        if match:
            yield match


def _error_offset(error: msgspec.DecodeError) -> int | None:
    """Index of the offending byte (msgspec reports the offset just past it)."""
    found = _ERROR_OFFSET.search(str(error))
    return int(found.group(1)) - 1 if found else None


# --- bytes ------------------------------------------------------------------------------------------------

def json_pieces(path: Path, warnings: list[str], piece_bytes: int = PIECE_BYTES) -> Iterator[bytes]:
    """The file's JSON text in pieces of about ``piece_bytes``, gunzipped if it starts with the gzip magic."""
    try:
        file = open(path, "rb")
    except OSError as error:
        raise InputError(f"{path}: cannot read the file ({error.strerror or error})") from error
    with file:
        first = _read(file, max(piece_bytes, 2))
        if first.startswith(b"\x1f\x8b"):
            yield from _gunzipped(file, first, path, warnings, piece_bytes)
            return
        while first:
            yield first
            first = _read(file, piece_bytes)


def _read(file: BinaryIO, size: int) -> bytes:
    data = file.read(size)
    progress.advance(len(data))
    return data


def _gunzipped(file: BinaryIO, compressed: bytes, path: Path, warnings: list[str], piece_bytes: int
               ) -> Iterator[bytes]:
    decompressor = isal_zlib.decompressobj(wbits=47)
    produced = 0
    while compressed:
        try:
            piece = decompressor.decompress(compressed, piece_bytes)
        except isal_zlib.error as error:
            if not produced:
                raise InputError(f"{path}: not a readable gzip file ({error}); expected {EXPECTED}") from None
            warnings.append(f"{path.name}: gzip stream broken ({error}) after {produced} bytes of JSON text")
            return
        produced += len(piece)
        if piece:
            yield piece
        if decompressor.eof:
            compressed = decompressor.unused_data or _read(file, piece_bytes)
            if compressed:  # a further gzip member follows
                decompressor = isal_zlib.decompressobj(wbits=47)
        else:
            compressed = decompressor.unconsumed_tail or _read(file, piece_bytes)
    if not decompressor.eof:
        warnings.append(f"{path.name}: gzip stream truncated after {produced} bytes of JSON text")
