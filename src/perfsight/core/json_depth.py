"""How deep the JSON perfsight reads may nest, checked before it is parsed: ``MAX_JSON_DEPTH``, the one limit;
``check_depth`` (for a text another decoder parses, such as msgspec's typed decoding) and ``loads_bounded``
(the check, then the standard library's parse). Python's json, msgspec and orjson recurse once per level of
arrays and objects within each other, and fail near a thousand levels with a RecursionError far from where
the file or key could be named; the depth here is found without recursion, by a scan of the bytes (the
brackets outside strings: a count of them when they are too few to matter, numpy's running sum otherwise),
and a document nested deeper than the limit is a ``JsonTooDeep`` naming what it is, the keys that lead to the
first value too deep, its depth and the limit. ``JsonTooDeep`` is an InputError (for the user) and a
ValueError, as a parse error is, so a reader that reads around a side file that is not JSON reads around one
nested too deeply alike.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

from perfsight.core.errors import InputErrorAt

#: the deepest nesting of arrays and objects perfsight reads: the formats it reads nest 3 to 8 levels
#: (a Kineto event's ``Input Dims`` 4, a torch_npu communication_matrix.json link 5, a tuning bank entry 6),
#: so 64 is far above any real file and far below the ~1,000 levels where the parsers' recursion fails
MAX_JSON_DEPTH = 64
#: how many keys an error names on the way to the first value nested too deeply (``$.entries["1"].signature``)
KEYS_NAMED = 4

#: every byte but the brackets and the quote: what the scan deletes before it counts
_NOT_STRUCTURE = bytes(i for i in range(256) if i not in b'[]{}"')
#: an escaped backslash or quote, blanked before the scan (a backslash in JSON only ever escapes the byte after
#: it, and these two could hide where a string ends)
_ESCAPED = re.compile(rb'\\[\\"]')
#: the key before a value: ``"name" :`` at the end of the text before it (escapes and all)
_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"\s*:\s*$')
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: how far before a value its key is looked for
_KEY_BYTES = 1024


class JsonTooDeep(InputErrorAt, ValueError):
    """A JSON text whose arrays and objects nest deeper than ``MAX_JSON_DEPTH``: ``<what>: <reason>``."""


def check_depth(data: bytes | str, what: str) -> None:
    """Nothing when the JSON text ``data`` nests at most ``MAX_JSON_DEPTH`` levels deep; else JsonTooDeep
    naming ``what`` (a file, or a file and its key), the keys to the first value too deep, its depth and the
    limit. Malformed text is left to the parser to describe."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    text = _ESCAPED.sub(b"__", raw) if b"\\" in raw else raw   # the same length: a byte keeps its place
    structure = text.translate(None, _NOT_STRUCTURE)
    if len(structure) - structure.count(b'"') <= MAX_JSON_DEPTH:   # too few brackets to nest deeper
        return
    import numpy as np  # only for a text with more brackets than the limit: manifests and small files skip it

    codes = np.frombuffer(structure, np.uint8)
    brackets = np.flatnonzero(codes != ord('"'))
    outside = brackets[(brackets - np.arange(len(brackets))) % 2 == 0]   # quotes before a bracket: place - rank
    opening = (codes[outside] == ord("[")) | (codes[outside] == ord("{"))
    depth = np.cumsum(opening.astype(np.int64) * 2 - 1)                 # after each bracket
    if depth.max(initial=0) > MAX_JSON_DEPTH:
        first = int(np.argmax(depth > MAX_JSON_DEPTH))
        path = "$"
        for level in range(1, KEYS_NAMED + 1):             # the containers around that value, from the outermost
            parent = outside[np.flatnonzero(opening[:first] & (depth[:first] == level))[-1]]
            child = outside[np.flatnonzero(opening[:first + 1] & (depth[:first + 1] == level + 1))[-1]]
            path += _key(raw, _place(text, int(child))) if codes[parent] == ord("{") else "[...]"
        raise JsonTooDeep.at(what, f"JSON nested {int(depth.max())} levels deep (arrays and objects within each "
                                   f"other) at `{path}...`; perfsight reads at most {MAX_JSON_DEPTH}")


def loads_bounded(data: bytes | str, what: str, *, parse_float: Callable[[str], Any] | None = None) -> Any:
    """The JSON text ``data`` (bytes: UTF-8) parsed by ``json.loads`` (``parse_float`` as it takes it) once
    ``check_depth`` passed: JsonTooDeep naming ``what`` when it nests too deeply, json.JSONDecodeError or
    UnicodeDecodeError (ValueErrors) when it is not JSON."""
    check_depth(data, what)
    return json.loads(data if isinstance(data, str) else bytes(data).decode("utf-8"), parse_float=parse_float)


def _place(text: bytes, ordinal: int) -> int:
    """Where in ``text`` its ``ordinal``-th (from 0) bracket or quote is, found a block at a time."""
    import numpy as np

    block, start = 1 << 20, 0
    while True:
        found = len(text[start:start + block].translate(None, _NOT_STRUCTURE))
        if ordinal < found:
            codes = np.frombuffer(text[start:start + block], np.uint8)
            return start + int(np.flatnonzero(np.isin(codes, np.frombuffer(b'[]{}"', np.uint8)))[ordinal])
        ordinal, start = ordinal - found, start + block


def _key(raw: bytes, value_at: int) -> str:
    """The key of the object member whose value starts at ``value_at`` in ``raw``, as a path step: ``.name`` or
    ``["1 2"]`` (``["?"]`` when the text before it is no key: malformed JSON)."""
    found = _KEY.search(raw, max(0, value_at - _KEY_BYTES), value_at)
    try:
        key = json.loads(found[0].rstrip(b" \t\r\n:").decode("utf-8", "replace")) if found else "?"
    except ValueError:
        key = "?"
    return f".{key}" if _IDENTIFIER.fullmatch(key) else f"[{json.dumps(key, ensure_ascii=False)}]"
