"""What reading a gzip bomb costs: peak memory and time of read_kineto on small files that inflate hugely.

Bombs (made in a scratch folder, deleted after): a Kineto trace of two events with SIZE of whitespace
between them ("whitespace", ~1000x compression), and one whose first event's name is a string of SIZE
letters ("string"). Each read runs in a fresh Python process (``ru_maxrss`` is its peak RSS, imports
included); the table gives the outcome (events read, or the error) with the default inflated-size limit
and with the limit raised above the bomb (``PERFSIGHT_MAX_INFLATED_MB``), which shows the reader's own
memory bound.

    PYTHONPATH=src python bench/gzip_bomb.py [--sizes-gb 1 4] [--kinds whitespace string] [--folder DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

CHUNK = 1 << 24
EVENT = b'{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": %d, "dur": 1}'

_PROGRAM = """
import json, resource, sys, time
from pathlib import Path
from perfsight.core.errors import PerfsightError
from perfsight.ingest.kineto.reader import read_kineto
start = time.perf_counter()
try:
    outcome = f"{read_kineto([Path(sys.argv[1])]).slices.num_rows} slices"
except PerfsightError as error:
    outcome = f"error: {error}"
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def make_bomb(path: Path, kind: str, size: int) -> Path:
    """A gzip trace whose ``kind`` of filler (whitespace between events, or one event's name) is ``size`` bytes."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    filler, before, after = {
        "whitespace": (b" ", b'{"traceEvents": [' + EVENT % 1 + b",", EVENT % 2 + b"]}"),
        "string": (b"a", b'{"traceEvents": [{"ph": "X", "name": "', b'", "ts": 1, "dur": 1}, ' + EVENT % 2 + b"]}"),
    }[kind]
    with open(path, "wb") as file:
        file.write(compressor.compress(before))
        block = filler * CHUNK
        for done in range(0, size, CHUNK):
            file.write(compressor.compress(block[:min(CHUNK, size - done)]))
        file.write(compressor.compress(after) + compressor.flush())
    return path


def measure(path: Path, limit_mb: int | None) -> dict:
    env = dict(os.environ)
    if limit_mb is not None:
        env["PERFSIGHT_MAX_INFLATED_MB"] = str(limit_mb)
    done = subprocess.run([sys.executable, "-c", _PROGRAM, str(path)], capture_output=True, text=True, env=env)
    if done.returncode:
        return {"outcome": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}", "seconds": 0,
                "peak_mib": 0}
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-gb", type=float, nargs="+", default=[1, 4])
    parser.add_argument("--kinds", nargs="+", default=["whitespace", "string"], choices=["whitespace", "string"])
    parser.add_argument("--folder", type=Path, default=None, help="scratch folder (default: a temp dir)")
    args = parser.parse_args()
    print("| bomb | file MB | inflated GB | limit | outcome | peak RSS MiB | s |")
    print("|---|---:|---:|---|---|---:|---:|")
    with tempfile.TemporaryDirectory(dir=args.folder) as scratch:
        for kind in args.kinds:
            for size_gb in args.sizes_gb:
                size = int(size_gb * (1 << 30))
                bomb = make_bomb(Path(scratch) / f"{kind}.pt.trace.json.gz", kind, size)
                for limit in (None, size // (1 << 20) + 1):
                    got = measure(bomb, limit)
                    shown = "default" if limit is None else f"raised to {limit} MB"
                    print(f"| {kind} | {bomb.stat().st_size / 1e6:.1f} | {size_gb:g} | {shown} "
                          f"| {got['outcome'][:120]} | {got['peak_mib']:.0f} | {got['seconds']:.1f} |", flush=True)
                bomb.unlink()


if __name__ == "__main__":
    main()
