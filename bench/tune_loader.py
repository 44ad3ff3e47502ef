"""An input-bound training script tuned and run with its bank (issue 33): the data loader's workers as a step
setting, end to end, by the commands a user types.

The script (written to a temporary directory, run unmodified) trains a small MLP on a dataset whose items
each take ``--item-ms`` to load - the latency of reading from remote storage or decoding, planted as a
sleep so that it holds on any machine - with a plain ``DataLoader(batch_size=8)`` (no workers), and prints
each epoch's wall time. First ``perfsight tune --mode step --bank B -- python train.py`` records its first
steps, finds them input-bound and tunes the loader's workers into B. Then ``--rounds`` rounds, interleaved,
the side going first alternating: ``perfsight run --on-demand -- python train.py`` with TUNE_BANK_PATH=B (the
bank applied; ``--on-demand`` arms without profiling, on both sides) against the same without it. A loader
winner applies from the loader's next epoch (its first iterator is made before the bank opens), so the
figure is the mean epoch time of epochs 2 and later; the speed-up is the untuned median over the tuned
median, with both sides' p10-p90.

    PYTHONPATH=src python bench/tune_loader.py                    # the table
    PYTHONPATH=src python bench/tune_loader.py --markdown         # the bench/RESULTS.md section
    PYTHONPATH=src python bench/tune_loader.py --rounds 2 --epochs 2 --batches 6   # smoke run

This is a benchmark, not a test: nothing here asserts on a time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from collect_overhead import machine_facts  # bench/ scripts import their siblings
from stats import load_average, median_cell, spread

SOURCE = Path(__file__).resolve().parents[1] / "src"
TITLE = "## An input-bound script: the data loader's workers tuned and applied end to end (issue 33)"

SCRIPT = '''
import sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

item_s, epochs, batches = float(sys.argv[1]) / 1e3, int(sys.argv[2]), int(sys.argv[3])


class RemoteItems(Dataset):
    def __len__(self):
        return batches * 8

    def __getitem__(self, index):
        time.sleep(item_s)                       # the planted load latency of one item
        return torch.randn(64), index % 4


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(RemoteItems(), batch_size=8)
for epoch in range(epochs):
    start = time.perf_counter()
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    print(f"epoch {epoch} {time.perf_counter() - start:.6f}", flush=True)
'''


def _perfsight(*args, env=None, cwd) -> subprocess.CompletedProcess:
    """``python -m perfsight args`` of this checkout (its src/ first on the path, wherever ``cwd`` is)."""
    path = os.pathsep.join(filter(None, [str(SOURCE), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "perfsight", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": path, **(env or {})}, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"perfsight {' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")
    return done


def _epochs(stdout: str) -> list[float]:
    return [float(line.split()[2]) for line in stdout.splitlines() if line.startswith("epoch ")]


def run(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="perfsight_tune_loader_") as scratch:
        where = Path(scratch)
        (where / "train.py").write_text(SCRIPT)
        command = [sys.executable, str(where / "train.py"), str(args.item_ms)]
        bank = where / "bank"
        start = time.perf_counter()
        tuned = _perfsight("tune", "--mode", "step", "--bank", bank, "--", *command, "1", str(args.batches),
                           cwd=where)
        tuning_s = time.perf_counter() - start
        [store] = bank.glob("*/step.json")
        entries = [e for e in json.loads(store.read_text())["entries"].values() if "loader" in e["signature"]]
        said = next((line for line in tuned.stderr.splitlines() if "waited" in line), "")
        times: dict[bool, list[float]] = {True: [], False: []}
        for index in range(args.rounds):
            for with_bank in ((True, False) if index % 2 == 0 else (False, True)):
                env = {"TUNE_BANK_PATH": str(bank)} if with_bank else {}
                done = _perfsight("run", "--on-demand", "-o", where / f"prof{index}{with_bank}", "--", *command,
                                  str(args.epochs), str(args.batches), env=env, cwd=where)
                later = _epochs(done.stdout)[1:]
                times[with_bank].append(sum(later) / len(later))
                if not args.quiet:
                    print(f"round {index}, {'with' if with_bank else 'without'} the bank: "
                          f"{times[with_bank][-1] * 1e3:.1f} ms/epoch", file=sys.stderr)
        return {"tuning_s": tuning_s, "entries": entries, "said": said, "times": times}


def markdown(result: dict, args, load_before: str, wall_s: float) -> str:
    facts = machine_facts(int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or os.cpu_count() or 1)
    tuned, untuned = result["times"][True], result["times"][False]
    speedup = spread(untuned)[0] / spread(tuned)[0]
    rows = []
    for entry in result["entries"]:
        for c in entry["candidates"]:
            us = f"{c['median_us'] / 1e3:.1f}" if c.get("median_us") is not None else "-"
            rows.append(f"| {c['name']} | {us} | {'yes' if c.get('ok') else 'no: ' + c.get('reason', '')} | "
                        f"{'winner' if c['name'] == entry['winner'] else ''} |")
    rejected = [e["rejected"] for e in result["entries"] if e.get("rejected")]
    return "\n".join([
        TITLE, "",
        f"A training script whose dataset takes {args.item_ms:g} ms to load an item (planted as a sleep: the latency "
        f"of remote storage or decoding), {args.batches} batches of 8 per epoch, a plain `DataLoader` (no workers). "
        f"`perfsight tune --mode step` on it took {result['tuning_s']:.1f} s and said: "
        f"\"{result['said'].removeprefix('perfsight: ')}\"", "",
        "The step settings' candidates for its loader, each a copy timed in blocks of replayed steps that draw its "
        "batches (ms per step):", "",
        "| candidate | ms/step | check | |", "|---|---:|---|---|", *rows, "",
        *([f"Rejected in its steps: {json.dumps(rejected)}", ""] if rejected else []),
        f"Then {args.rounds} interleaved rounds of `perfsight run --on-demand` with the bank (TUNE_BANK_PATH) and "
        f"without it, {args.epochs} epochs each; the mean epoch of epochs 2-{args.epochs} (a loader winner applies "
        f"from the loader's next epoch):", "",
        "| | ms/epoch, median (p10-p90) |", "|---|---:|",
        f"| without the bank | {median_cell([t * 1e3 for t in untuned], 'ms', 1)} |",
        f"| with the bank | {median_cell([t * 1e3 for t in tuned], 'ms', 1)} |",
        f"| speed-up (median over median) | {speedup:.2f}x |", "",
        f"Machine: {facts['cpu']}, {facts['cores']} cores, torch {facts['torch']}, Python {facts['python']}. "
        f"Load average (1, 5, 15 min) before / after: {load_before} / {load_average()}. Wall time: {wall_s:.0f} s.",
        "", "Reproduce (from the repository root):", "",
        f"    PYTHONPATH=src python bench/tune_loader.py {' '.join(args.argv_shown)}".rstrip(), ""])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--item-ms", type=float, default=2.0, help="load time of one item, ms (default 2)")
    parser.add_argument("--batches", type=int, default=40, help="batches of 8 per epoch (default 40)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per timed run (default 4)")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    parser.add_argument("--markdown", action="store_true", help="print the bench/RESULTS.md section")
    parser.add_argument("--quiet", action="store_true", help="no per-round lines on stderr")
    args = parser.parse_args(argv)
    args.argv_shown = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--quiet"]
    load_before = load_average()
    start = time.perf_counter()
    result = run(args)
    section = markdown(result, args, load_before, time.perf_counter() - start)
    print(section if args.markdown else section.split("\n\n", 2)[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
