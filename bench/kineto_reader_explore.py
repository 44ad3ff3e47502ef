"""How fast and how lean is reading a Kineto trace? perfsight's reader against plain decoders.

Each variant runs in a fresh Python process, several times; the table shows the median wall time of the
read itself (imports excluded) and the median peak RSS of the whole process (imports included), next to
the peak RSS of a process that only imports what the variant needs.

    python bench/kineto_reader_explore.py [--trace PATH] [--runs N]

The default trace is the largest public one, HTA's df_index_resolver (53.7 MB of JSON, 216k events).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_TRACE = (Path(__file__).resolve().parents[1].parent / "shared" / "data" / "kineto" / "hta"
                 / "df_index_resolver" / "df_index_resolver.json.gz")

#: name -> (imports, read statement); the statement reads the file at TRACE
VARIANTS = {
    "gzip + json.loads (dicts, floats)": ("import gzip, json", "json.loads(gzip.decompress(TRACE.read_bytes()))"),
    "gzip + orjson.loads (dicts, floats)": ("import gzip, orjson", "orjson.loads(gzip.decompress(TRACE.read_bytes()))"),
    "gzip + msgspec untyped (dicts, floats)": ("import gzip, msgspec",
                                               "msgspec.json.decode(gzip.decompress(TRACE.read_bytes()))"),
    "perfsight TraceStream (typed msgspec batches)": (
        "from perfsight.ingest.common.chrome_json import TraceStream",
        "sum(len(batch) for batch in TraceStream(TRACE).batches())"),
    "perfsight read_kineto (all six tables)": ("from perfsight.ingest.kineto.reader import read_kineto",
                                               "read_kineto([TRACE])"),
}

_PROGRAM = """
import resource, sys, time
from pathlib import Path
TRACE = Path(sys.argv[1])
{imports}
start = time.perf_counter()
if sys.argv[2] == "read":
    {statement}
seconds = time.perf_counter() - start
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def run_once(trace: Path, imports: str, statement: str, mode: str) -> tuple[float, float]:
    program = _PROGRAM.format(imports=imports, statement=statement)
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    output = subprocess.run([sys.executable, "-c", program, str(trace), mode], check=True, capture_output=True,
                            text=True, env=environment).stdout
    seconds, peak_mib = output.split()
    return float(seconds), float(peak_mib)


def measure(trace: Path, runs: int) -> list[dict]:
    rows = []
    for name, (imports, statement) in VARIANTS.items():
        reads = [run_once(trace, imports, statement, "read") for _ in range(runs)]
        baseline = statistics.median(run_once(trace, imports, statement, "imports")[1] for _ in range(2))
        rows.append({
            "variant": name,
            "read_s": statistics.median(seconds for seconds, _ in reads),
            "read_s_min": min(seconds for seconds, _ in reads),
            "peak_mib": statistics.median(peak for _, peak in reads),
            "imports_mib": baseline,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    arguments = parser.parse_args()
    rows = measure(arguments.trace, arguments.runs)
    if arguments.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{arguments.trace.name}, {arguments.runs} runs each\n")
    print("| variant | read s (median / min) | peak RSS MiB | imports only MiB |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['variant']} | {row['read_s']:.2f} / {row['read_s_min']:.2f} | {row['peak_mib']:.0f} "
              f"| {row['imports_mib']:.0f} |")


if __name__ == "__main__":
    main()
