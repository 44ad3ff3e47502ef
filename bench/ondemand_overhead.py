"""What an armed job costs per step (issue 32): the bundled models' training step with no profiler against
the same step under ``perfsight.Profiler(on_demand=True)`` (armed: each step's time recorded in the live folder,
requests watched by a thread; nothing captured).

The models: ``demo`` (perfsight.demo.train's SmallCNN on SyntheticImages through a DataLoader, batch 32: the
armed job also times each batch fetch), and bench/tune_models.py's ``cnn`` and ``transformer`` (their step
on fixed inputs). A step runs from its start (the batch fetch for ``demo``) to the return of ``step()``.

Method: a shared machine's speed drifts between processes by more than the cost measured here, so each
process (a round) alternates blocks of ``--block`` steps plain and armed, in the order A B B A (repeated
``--pairs`` / 2 times), after ``--warmup`` untimed steps; an armed block arms a fresh Profiler and closes it at
its end (its watcher thread runs only then). Each block is summarised by its median step; each adjacent
plain-armed pair gives a ratio. Rounds are fresh Python processes; torch keeps its default thread count
(``--threads N`` pins it, labelled). Reported per model: each configuration's median step (pooled, p10-p90),
the paired overhead (the armed block's median over its plain neighbour's, minus one: the median and p10-p90
over every pair of every round), and the median time of the armed ``step()`` call itself.

    PYTHONPATH=src python bench/ondemand_overhead.py [--rounds 4] [--pairs 8] [--block 40] [--markdown]

This is a benchmark, not a test: nothing here asserts on a time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from stats import load_average, quantile  # bench/ siblings

MODELS = ("demo", "cnn", "transformer")
#: the configurations, plain first: a round's blocks go A B B A ...
CONFIGS = ("plain", "armed")


def run_child(model: str, pairs: int, block: int, warmup: int, threads: int | None) -> dict:
    """One round: blocks of ``block`` steps, plain and armed in the order A B B A ..., ``pairs`` pairs."""
    import torch
    import torch.nn.functional as F

    import perfsight

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    if model == "demo":
        from torch.utils.data import DataLoader

        from perfsight.demo.train import SmallCNN, SyntheticImages

        net = SmallCNN()
        batches = iter(DataLoader(SyntheticImages((warmup + 2 * pairs * block) * 32), batch_size=32))

        def next_batch():
            return next(batches)
    else:
        from tune_models import models

        _, net, inputs, labels = models(tiny=False)[model]

        def next_batch():
            return inputs, labels
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def train(steps: int, profiler) -> tuple[list[float], list[float]]:
        times, hooks = [], []
        for _ in range(steps):
            began = time.perf_counter()
            x, y = next_batch()
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            optimizer.step()
            hooked = time.perf_counter()
            if profiler is not None:
                profiler.step()
            ended = time.perf_counter()
            times.append(ended - began)
            hooks.append(ended - hooked)
        return times, hooks

    train(warmup, None)
    order = [config for index in range(pairs) for config in (CONFIGS if index % 2 == 0 else CONFIGS[::-1])]
    blocks = []
    with tempfile.TemporaryDirectory(prefix="perfsight-ondemand-bench-") as out:
        for config in order:
            profiler = perfsight.Profiler(output_path=out, on_demand=True) if config == "armed" else None
            times, hooks = train(block, profiler)
            if profiler is not None:
                profiler.close()
            blocks.append({"config": config, "step_s": times, "hook_s": hooks})
    return {"model": model, "blocks": blocks, "threads": torch.get_num_threads()}


def run_all(args) -> list[dict]:
    rounds = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.abspath(__file__)),
                                                        os.environ.get("PYTHONPATH", "")])}
    for index in range(args.rounds):
        for model in args.models:
            command = [sys.executable, os.path.abspath(__file__), "--child", model, "--pairs", str(args.pairs),
                       "--block", str(args.block), "--warmup", str(args.warmup)] + (
                ["--threads", str(args.threads)] if args.threads else [])
            done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            rounds.append({**result, "round": index})
            if not args.quiet:
                ratios = _pair_ratios(result["blocks"])
                print(f"round {index + 1} {model}: armed/plain {statistics.median(ratios):.4f}", file=sys.stderr)
    return rounds


def _pair_ratios(blocks: list[dict]) -> list[float]:
    """Each adjacent plain-armed pair's armed median over its plain median."""
    medians = [(block["config"], statistics.median(block["step_s"])) for block in blocks]
    pairs = zip(medians[0::2], medians[1::2])
    return [dict(pair)["armed"] / dict(pair)["plain"] for pair in pairs]


def summarise(rounds: list[dict], models: list[str]) -> list[dict]:
    rows = []
    for model in models:
        mine = [r for r in rounds if r["model"] == model]
        pooled = {config: [t for r in mine for b in r["blocks"] if b["config"] == config for t in b["step_s"]]
                  for config in CONFIGS}
        ratios = [ratio for r in mine for ratio in _pair_ratios(r["blocks"])]
        hooks = [t for r in mine for b in r["blocks"] if b["config"] == "armed" for t in b["hook_s"]]
        rows.append({"model": model, "threads": mine[0]["threads"],
                     **{config: (statistics.median(values), quantile(values, 0.1), quantile(values, 0.9))
                        for config, values in pooled.items()},
                     "overhead": (statistics.median(ratios) - 1, quantile(ratios, 0.1) - 1, quantile(ratios, 0.9) - 1),
                     "hook": statistics.median(hooks), "pairs": len(ratios), "rounds": len(mine)})
    return rows


def markdown(rows: list[dict], args, seconds: float) -> str:
    pinned = f" --threads {args.threads}" if args.threads else ""
    lines = ["## What an armed job costs per step (issue 32)", "",
             f"`PYTHONPATH=src python bench/ondemand_overhead.py --rounds {args.rounds} --pairs {args.pairs} --block "
             f"{args.block}{pinned} --markdown`: each model's training step plain and armed (`perfsight.Profiler("
             f"on_demand=True)`, nothing captured) in alternating blocks of {args.block} steps (A B B A ...) in each "
             f"of {args.rounds} fresh processes, after {args.warmup} warm-up steps.", "",
             "| model | torch threads | plain step, median (p10-p90) | armed step, median (p10-p90) | "
             "armed / plain - 1, paired by block: median (p10-p90) | the armed step() call, median |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        cells = [f"{row[c][0] * 1e3:.3f} ms ({row[c][1] * 1e3:.3f}-{row[c][2] * 1e3:.3f})" for c in CONFIGS]
        over = row["overhead"]
        lines.append(f"| {row['model']} | {row['threads']} | {cells[0]} | {cells[1]} | {over[0]:+.2%} "
                     f"({over[1]:+.2%} to {over[2]:+.2%}), {row['pairs']} pairs | {row['hook'] * 1e6:.1f} us "
                     f"({row['hook'] / row['plain'][0]:.3%} of the plain step) |")
    lines += ["", f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}; load average at the end: "
                  f"{load_average()}; wall time {seconds:.0f} s."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="fresh processes per model (default 4)")
    parser.add_argument("--pairs", type=int, default=8, help="plain-armed block pairs per round (default 8)")
    parser.add_argument("--block", type=int, default=40, help="steps per block (default 40)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="pin torch's threads (default: torch's own)")
    parser.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS))
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child, args.pairs, args.block, args.warmup, args.threads)))
        return
    began = time.perf_counter()
    rows = summarise(run_all(args), args.models)
    if args.markdown:
        print(markdown(rows, args, time.perf_counter() - began))
    else:
        for row in rows:
            print(row)


if __name__ == "__main__":
    main()
