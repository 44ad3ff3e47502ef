"""What an armed job costs per step (issue 32): the bundled models' training step with no profiler against
the same step under ``perfsight.Profiler(on_demand=True)`` (armed: each step's time recorded in the live folder,
requests watched by a thread; nothing captured).

The models: ``demo`` (perfsight.demo.train's SmallCNN on SyntheticImages through a DataLoader, batch 32: the
armed job also times each batch fetch), and bench/tune_models.py's ``cnn`` and ``transformer`` (their step
on fixed inputs). A step runs from its start (the batch fetch for ``demo``) to the return of ``step()``.

Method: every model-configuration-round is a fresh Python subprocess; the configurations alternate within a
round and the first one alternates between rounds (A, B, then B, A); torch keeps its default thread count
(``--threads N`` pins it, labelled). Each run trains ``--warmup`` steps untimed, then ``--steps`` timed steps.
Reported per model: the median step of each configuration (pooled over rounds, p10-p90), the paired
overhead: per round, the armed median over the same round's plain median, as the median and the p10-p90 over
rounds, and the median time of the armed ``step()`` call itself (what arming adds to a step, free of the
step-to-step noise that the paired ratio must average away).

    PYTHONPATH=src python bench/ondemand_overhead.py [--rounds 12] [--steps 200] [--markdown]

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
CONFIGS = {"plain": "no profiler", "armed": "perfsight.Profiler(on_demand=True), nothing captured"}


def run_child(model: str, config: str, steps: int, warmup: int, threads: int | None) -> dict:
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
        batches = iter(DataLoader(SyntheticImages((steps + warmup) * 32), batch_size=32))

        def next_batch():
            return next(batches)
    else:
        from tune_models import models

        _, net, inputs, labels = models(tiny=False)[model]

        def next_batch():
            return inputs, labels
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    with tempfile.TemporaryDirectory(prefix="perfsight-ondemand-bench-") as out:
        profiler = perfsight.Profiler(output_path=out, on_demand=True) if config == "armed" else None
        times, hooks = [], []
        for index in range(warmup + steps):
            began = time.perf_counter()
            x, y = next_batch()
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            optimizer.step()
            hooked = time.perf_counter()
            if profiler is not None:
                profiler.step()
            if index >= warmup:
                ended = time.perf_counter()
                times.append(ended - began)
                hooks.append(ended - hooked)
        if profiler is not None:
            profiler.close()
    return {"model": model, "config": config, "step_s": times, "hook_s": hooks, "threads": torch.get_num_threads()}


def run_all(args) -> list[dict]:
    rounds = []
    for index in range(args.rounds):
        for model in args.models:
            order = list(CONFIGS) if index % 2 == 0 else list(reversed(CONFIGS))
            for config in order:
                command = [sys.executable, os.path.abspath(__file__), "--child", model, config, "--steps",
                           str(args.steps), "--warmup", str(args.warmup)] + (
                    ["--threads", str(args.threads)] if args.threads else [])
                done = subprocess.run(command, capture_output=True, text=True, check=True,
                                      env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                          [os.path.dirname(os.path.abspath(__file__)),
                                           os.environ.get("PYTHONPATH", "")])})
                result = json.loads(done.stdout.strip().splitlines()[-1])
                rounds.append({**result, "round": index})
                if not args.quiet:
                    print(f"round {index + 1} {model} {config}: median {statistics.median(result['step_s']) * 1e3:.3f}"
                          " ms", file=sys.stderr)
    return rounds


def summarise(rounds: list[dict], models: list[str]) -> list[dict]:
    rows = []
    for model in models:
        pooled = {config: [t for r in rounds if r["model"] == model and r["config"] == config for t in r["step_s"]]
                  for config in CONFIGS}
        medians = {(r["round"], r["config"]): statistics.median(r["step_s"]) for r in rounds if r["model"] == model}
        ratios = sorted(medians[(i, "armed")] / medians[(i, "plain")] for i in {r for r, _ in medians})
        rows.append({"model": model, "threads": next(r["threads"] for r in rounds if r["model"] == model),
                     **{config: (statistics.median(values), quantile(values, 0.1), quantile(values, 0.9))
                        for config, values in pooled.items()},
                     "overhead": (statistics.median(ratios) - 1, quantile(ratios, 0.1) - 1, quantile(ratios, 0.9) - 1),
                     "hook": statistics.median(t for r in rounds if r["model"] == model and r["config"] == "armed"
                                               for t in r["hook_s"]),
                     "rounds": len(ratios)})
    return rows


def markdown(rows: list[dict], args, seconds: float) -> str:
    lines = ["## What an armed job costs per step (issue 32)", "",
             f"`PYTHONPATH=src python bench/ondemand_overhead.py --rounds {args.rounds} --steps {args.steps} "
             f"--markdown`: each model's training step plain and armed (`perfsight.Profiler(on_demand=True)`, nothing"
             " captured), every run a fresh process, interleaved; per-step times after "
             f"{args.warmup} warm-up steps.", "",
             "| model | torch threads | plain step, median (p10-p90) | armed step, median (p10-p90) | "
             "armed / plain - 1, paired by round: median (p10-p90) | the armed step() call, median |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        cells = [f"{row[c][0] * 1e3:.3f} ms ({row[c][1] * 1e3:.3f}-{row[c][2] * 1e3:.3f})" for c in CONFIGS]
        over = row["overhead"]
        lines.append(f"| {row['model']} | {row['threads']} | {cells[0]} | {cells[1]} | {over[0]:+.2%} "
                     f"({over[1]:+.2%} to {over[2]:+.2%}), {row['rounds']} rounds | {row['hook'] * 1e6:.1f} us "
                     f"({row['hook'] / row['plain'][0]:.3%} of the plain step) |")
    lines += ["", f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}; load average at the end: "
                  f"{load_average()}; wall time {seconds:.0f} s."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="pin torch's threads (default: torch's own)")
    parser.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS))
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(*args.child, args.steps, args.warmup, args.threads)))
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
