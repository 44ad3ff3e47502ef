"""Make a ~1 GB Kineto trace by replicating the ProfilerSteps of the largest real trace.

The source (HTA's df_index_resolver: 53.7 MB of JSON, 216k events, ProfilerStep#2-#6 of rank 1 on a V100)
is copied K times end to end: copy k has every timed event (ops, kernels, runtime calls, memcpy/memset,
memory events, launch flows) shifted by k x (the source's time span + 1 ms), fresh ids (correlation,
flow id and External id shifted together, so launches still find their kernels; Ev Idx and autograd
Sequence number shifted too) and renumbered steps (ProfilerStep#2-#6 become #7-#11, ...). The metadata
events and the whole-window spans ("PyTorch Profiler (0)", "Iteration Start", "Record Window End") are
written once, stretched over all copies, so the result is one valid profiling window of 5K steps.

Events are written in Kineto's own layout (one key group per line), so a byte of this file holds as many
events as a byte of a real trace. The file is uncompressed JSON and large: write it to a scratch location,
never into the repository.

    python bench/make_big_trace.py OUT [--size-gb 1.0 | --copies K] [--trace SRC]

OUT is a file path or an existing directory (the file is then OUT/df_index_resolver_x<K>.pt.trace.json).
Prints the path, size, copies and event count as JSON.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
from pathlib import Path

DEFAULT_TRACE = (Path(__file__).resolve().parents[2] / "shared" / "data" / "kineto" / "hta" / "df_index_resolver"
                 / "df_index_resolver.json.gz")

#: arg keys that are ids, and the counter each one shares (correlation = flow id = External id in Kineto)
_ID_ARGS = {"correlation": "id", "External id": "id", "Ev Idx": "ev", "Sequence number": "seq"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_GAP_US = 1000                     # between copies


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _is_window_event(event: dict) -> bool:
    """Written once: metadata, and the spans Kineto draws over the whole window (string pids)."""
    return event.get("ph") == "M" or not isinstance(event.get("pid"), int)


def _fmt(value) -> str:
    return json.dumps(value, ensure_ascii=False).replace("%", "%%")


def _literal(text: str) -> str:
    return text.replace("%", "%%")


def _template(event: dict, kinds: list[str], values: list[int]) -> str:
    """The event in Kineto's layout as a %-template; the shifting numbers become %d, their kinds and base
    values are appended to ``kinds`` and ``values``."""
    def number(kind: str, value: int) -> str:
        kinds.append(kind)
        values.append(value)
        return "%d"

    head = []
    for key, value in event.items():
        if key == "args":
            continue
        if key == "ts" and isinstance(value, float) and not value.is_integer() and "e" not in repr(value):
            whole, fraction = repr(value).split(".")          # shift the whole us, keep the ns decimals as text
            head.append(f'"ts": {number("ts", int(whole))}.{fraction}')
        elif key == "ts" and isinstance(value, (int, float)):
            head.append(f'"ts": {number("ts", int(value))}' + (".0" if isinstance(value, float) else ""))
        elif key == "id" and event.get("ph") in ("s", "f", "t"):
            head.append(f'"id": {number("id", value)}')
        elif key == "name" and isinstance(value, str) and _STEP.match(value):
            head.append(f'"name": "ProfilerStep#{number("step", int(_STEP.match(value).group(1)))}"')
        else:
            head.append(f"{_fmt(key)}: {_fmt(value)}")
    text = "  {\n    " + ", ".join(head)
    args = event.get("args")
    if args is not None:
        parts = []
        for key, value in args.items():
            if key in _ID_ARGS and isinstance(value, int):
                parts.append(f"{_fmt(key)}: {number(_ID_ARGS[key], value)}")
            else:
                parts.append(f"{_fmt(key)}: {_fmt(value)}")
        text += ",\n    " + _literal('"args": {\n      ') + ", ".join(parts) + "\n    }"
    return text + "\n  }"


def make(source: Path, out: Path, size_gb: float = 1.0, copies: int | None = None) -> dict:
    trace = _load(source)
    events = trace.pop("traceEvents")
    once = [e for e in events if _is_window_event(e)]
    timed = [e for e in events if not _is_window_event(e)]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + e.get("dur", 0) for e in timed)
    period = math.ceil(end - start) + _GAP_US          # whole microseconds: float timestamps stay exact
    steps = sorted({int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))})
    if not steps:
        raise SystemExit(f"{source}: no ProfilerStep#N events to replicate")

    templates, kinds, bases = [], [], []
    for event in timed:
        k, v = [], []
        templates.append(_template(event, k, v))
        kinds.append(k)
        bases.append(v)
    maxima = {"id": 0, "ev": 0, "seq": 0}
    for ks, vs in zip(kinds, bases):
        for kind, value in zip(ks, vs):
            if kind in maxima:
                maxima[kind] = max(maxima[kind], value)
    copy_bytes = sum(len(t % tuple(v)) + 2 for t, v in zip(templates, bases))   # ",\n" per event
    copies = copies or max(1, round(size_gb * 1e9 / copy_bytes))

    last_end = end + (copies - 1) * period
    header = json.dumps({**trace, "traceEvents": "@EVENTS@"}, indent=2, ensure_ascii=False)
    before, after = header.split('"@EVENTS@"')
    out = out / f"{source.name.split('.')[0]}_x{copies}.pt.trace.json" if out.is_dir() else out
    count = 0
    with open(out, "w", encoding="utf-8") as f:
        f.write(before + "[\n")
        first = True
        for k in range(copies):
            offsets = {"ts": k * period, "id": k * (maxima["id"] + 1), "ev": k * (maxima["ev"] + 1),
                       "seq": k * (maxima["seq"] + 1), "step": k * len(steps)}
            chunk = []
            for template, ks, vs in zip(templates, kinds, bases):
                chunk.append(template % tuple(v + offsets[kind] for kind, v in zip(ks, vs)))
            f.write(("" if first else ",\n") + ",\n".join(chunk))
            first = False
            count += len(chunk)
        for event in once:                                  # metadata and window spans, stretched
            event = dict(event)
            shift = 0
            if event.get("ph") == "X" and "dur" in event:
                event["dur"] = round(last_end - event["ts"], 3)
            elif event.get("ph") == "i" and event.get("ts", start) > start:    # Record Window End
                shift = (copies - 1) * period
            ks, vs = [], []
            template = _template(event, ks, vs)
            f.write(",\n" + template % tuple(v + (shift if kind == "ts" else 0) for kind, v in zip(ks, vs)))
            count += 1
        f.write("\n  ]" + after + "\n")
    return {"path": str(out), "bytes": out.stat().st_size, "copies": copies, "events": count,
            "steps": len(steps) * copies, "source": str(source)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="output file, or an existing directory to write it in")
    parser.add_argument("--size-gb", type=float, default=1.0, help="target size in GB (1e9 bytes)")
    parser.add_argument("--copies", type=int, help="number of copies (overrides --size-gb)")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="the trace to replicate")
    args = parser.parse_args(argv)
    print(json.dumps(make(args.trace, args.out, args.size_gb, args.copies)))


if __name__ == "__main__":
    sys.exit(main())
