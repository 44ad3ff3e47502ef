"""Collection overhead of perfsight (issue 2): per-step wall time of the demo model with profiling off and on.

Configurations (each a fresh model, optimizer, DataLoader and profiler per round):

    off       no profiler
    l0        perfsight.Profiler(task_time="l0")              timing only, no shapes
    l1        perfsight.Profiler()  (task_time="l1")          timing + shapes, dtypes, FLOPs (the default)
    l1_full   perfsight l1 + profile_memory + with_stack
    torch     plain torch.profiler.profile(record_shapes=True, with_flops=True), the same torch settings as l1,
              with a chrome-trace export as on_trace_ready: what perfsight wraps, for reference

The step is the demo's training step (perfsight.demo.train: SmallCNN on SyntheticImages, batch 32, SGD,
DataLoader with num_workers=0): fetch the batch, forward, loss, backward, optimizer step, then the profiler's
``step()``. Its time runs from fetching the batch to the return of ``step()``. Each round trains ``--steps``
steps and profiles steps ``--first``..``--last`` (default 5-24 of 30); only those steps are reported, the
warm-up steps before them are not. The ``step()`` that ends the profiled range stops tracing, post-processes
the events and writes the trace file: a once-per-window cost, left out of the last step's time and reported
on its own ("stop+export"), as are the Profiler's creation ("setup") and ``close()``.

Method (the machine is shared and noisy): torch pinned to one thread, configurations interleaved round by
round (the starting configuration rotates each round so none always runs first), and every
configuration-round in a fresh Python subprocess by default (``--isolation inprocess`` repeats profiler
sessions in one process instead; see RESULTS.md for why subprocesses were chosen). Reported: the median
and p10-p90 of the per-step times pooled over rounds, the overhead of the pooled median against "off", and
a paired overhead: per round, the configuration's median step over the same round's "off" median, summarised
as the median and IQR over rounds (robust to drift in machine load between rounds).

    PYTHONPATH=src python bench/collect_overhead.py                 # table (default: 12 rounds, ~3-4 min)
    PYTHONPATH=src python bench/collect_overhead.py --markdown      # the RESULTS.md section
    PYTHONPATH=src python bench/collect_overhead.py --rounds 1 --steps 4 --first 1 --last 2   # smoke

This is a benchmark, not a test: nothing here asserts on a time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

CONFIGS = {
    "off": "profiling off",
    "l0": "perfsight l0 (timing only)",
    "l1": "perfsight l1 (default: shapes, dtypes, flops)",
    "l1_full": "perfsight l1 + profile_memory + with_stack",
    "torch": "plain torch.profiler (record_shapes, with_flops)",
}
SECTION = "Collection overhead (issue 2)"


# --- one configuration-round ------------------------------------------------------------------------------


def run_round(config: str, *, steps: int, first: int, last: int, batch: int, threads: int, seed: int) -> dict:
    """Train ``steps`` steps under ``config``; per-step times in seconds and the one-off costs."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from perfsight.demo.train import SmallCNN, SyntheticImages

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(SyntheticImages(steps * batch), batch_size=batch, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model.train()

    import perfsight  # noqa: F401 - imported before timing: setup_s is making the profiler, not importing it
    import torch.profiler  # noqa: F401

    out_dir = tempfile.mkdtemp(prefix=f"perfsight-bench-{config}-")
    setup = close = 0.0
    try:
        t0 = time.perf_counter()
        prof = _make_profiler(config, out_dir, first, last)
        setup = time.perf_counter() - t0

        work, hook = [], []
        batches = iter(loader)
        for _ in range(steps):
            t0 = time.perf_counter()
            images, labels = next(batches)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            t1 = time.perf_counter()
            if prof is not None:
                prof.step()
            t2 = time.perf_counter()
            work.append(t1 - t0)
            hook.append(t2 - t1)

        t0 = time.perf_counter()
        if prof is not None:
            _close(config, prof)
        close = time.perf_counter() - t0
        traces = sorted(p.name for p in Path(out_dir).rglob("*.pt.trace.json"))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)

    profiled = list(range(first, last + 1))
    step_times = [work[i] + (hook[i] if i != last else 0.0) for i in profiled]
    return {"config": config, "step_s": step_times, "export_s": hook[last], "setup_s": setup, "close_s": close,
            "warmup_step_s": [work[i] + hook[i] for i in range(first)], "trace_files": len(traces),
            "threads": torch.get_num_threads(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _make_profiler(config: str, out_dir: str, first: int, last: int):
    if config == "off":
        return None
    if config == "torch":
        from torch.profiler import ProfilerActivity, profile, schedule

        def save(p):
            p.export_chrome_trace(os.path.join(out_dir, "trace.pt.trace.json"))

        with warnings.catch_warnings():   # warmup=0 warns; perfsight's schedule has no warm-up by default either
            warnings.simplefilter("ignore")
            prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True,
                           schedule=schedule(wait=first, warmup=0, active=last - first + 1, repeat=1),
                           on_trace_ready=save)
            prof.start()
        return prof
    import perfsight

    options = {"l0": {"task_time": "l0"}, "l1": {"task_time": "l1"},
               "l1_full": {"task_time": "l1", "profile_memory": True, "with_stack": True}}[config]
    return perfsight.Profiler(output_path=out_dir, steps=f"{first}-{last}", **options)


def _close(config: str, prof) -> None:
    if config == "torch":
        prof.stop()
    else:
        prof.close()


# --- the driver -------------------------------------------------------------------------------------------


def _child_command(config: str, args) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--child", config, "--steps", str(args.steps),
            "--first", str(args.first), "--last", str(args.last), "--batch", str(args.batch),
            "--threads", str(args.threads), "--seed", str(args.seed)]


def _child_env(threads: int) -> dict:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    for name in ("PERFSIGHT_OPTIONS", "PROFILING_OPTIONS", "MS_PROFILER_OPTIONS"):
        env.pop(name, None)   # a profiler switched on from the environment would skew every configuration
    return env


def run_in_subprocess(config: str, args) -> dict:
    done = subprocess.run(_child_command(config, args), capture_output=True, text=True, env=_child_env(args.threads))
    if done.returncode != 0:
        raise RuntimeError(f"{config} round failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_all(args, progress=None) -> dict:
    configs = args.configs
    rounds: list[dict[str, dict]] = []
    started = time.perf_counter()
    load_before = _loadavg()
    for r in range(args.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        results = {}
        for config in order:
            kwargs = dict(steps=args.steps, first=args.first, last=args.last, batch=args.batch,
                          threads=args.threads, seed=args.seed)
            results[config] = (run_in_subprocess(config, args) if args.isolation == "process"
                               else run_round(config, **kwargs))
        rounds.append(results)
        if progress:
            progress(f"round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s): "
                     + "  ".join(f"{c} {1e3 * statistics.median(results[c]['step_s']):.2f}" for c in configs))
    return {"rounds": rounds, "isolation": args.isolation, "wall_s": time.perf_counter() - started,
            "load_before": load_before,
            "load_after": _loadavg()}


def summarise(data: dict, configs: list[str]) -> list[dict]:
    rounds = data["rounds"]
    pooled = {c: [t for rnd in rounds for t in rnd[c]["step_s"]] for c in configs}
    base = statistics.median(pooled["off"]) if "off" in pooled else None
    rows = []
    for c in configs:
        times = pooled[c]
        row = {"config": c, "label": CONFIGS[c], "n": len(times), "median_ms": 1e3 * statistics.median(times),
               "p10_ms": 1e3 * _quantile(times, 0.10), "p90_ms": 1e3 * _quantile(times, 0.90),
               "setup_ms": 1e3 * statistics.median(r[c]["setup_s"] for r in rounds),
               "export_ms": 1e3 * statistics.median(r[c]["export_s"] for r in rounds),
               "close_ms": 1e3 * statistics.median(r[c]["close_s"] for r in rounds),
               "trace_files": min(r[c]["trace_files"] for r in rounds),
               "rss_mb": statistics.median(r[c]["peak_rss_mb"] for r in rounds) if data["isolation"] == "process"
               else None}
        if base:
            row["overhead_pct"] = 100 * (statistics.median(times) / base - 1)
            paired = [100 * (statistics.median(r[c]["step_s"]) / statistics.median(r["off"]["step_s"]) - 1)
                      for r in rounds]
            row["paired_pct"] = statistics.median(paired)
            row["paired_q1"], row["paired_q3"] = _quantile(paired, 0.25), _quantile(paired, 0.75)
        rows.append(row)
    return rows


def _quantile(values, q: float) -> float:
    """Linear-interpolation quantile (numpy's default), for any number of values."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def machine_facts(threads: int) -> dict:
    import torch

    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cores": os.cpu_count(), "usable_cores": usable, "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "threads": threads}


# --- output -----------------------------------------------------------------------------------------------


def _pct(row, key):
    return f"{row[key]:+.1f}%" if key in row else "-"


def _paired(row):
    if "paired_pct" not in row:
        return "-"
    return f"{row['paired_pct']:+.1f}% [{row['paired_q1']:+.1f}, {row['paired_q3']:+.1f}]"


def _once(row, key):
    return "-" if row["config"] == "off" else f"{row[key]:.1f}"


HEADERS = ["config", "median ms/step", "p10-p90 ms", "overhead", "paired overhead [IQR]", "setup ms",
           "stop+export ms", "close ms", "peak RSS MB"]


def _cells(row) -> list[str]:
    return [row["config"], f"{row['median_ms']:.2f}", f"{row['p10_ms']:.2f}-{row['p90_ms']:.2f}",
            _pct(row, "overhead_pct"), _paired(row), _once(row, "setup_ms"), _once(row, "export_ms"),
            _once(row, "close_ms"), "-" if row["rss_mb"] is None else f"{row['rss_mb']:.0f}"]


def format_table(rows: list[dict]) -> str:
    table = [HEADERS] + [_cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
             for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def command_line(args) -> str:
    parts = ["PYTHONPATH=src python bench/collect_overhead.py"]
    parser = build_parser()
    defaults = parser.parse_args([])
    resolve_range(defaults, parser)
    for name in ("rounds", "steps", "first", "last", "batch", "threads", "seed", "isolation"):
        if getattr(args, name) != getattr(defaults, name):
            parts.append(f"--{name} {getattr(args, name)}")
    if args.configs != defaults.configs:
        parts.append("--configs " + ",".join(args.configs))
    return " ".join(parts)


def format_markdown(rows, facts, data, args) -> str:
    n_profiled = args.last - args.first + 1
    lines = [
        f"## {SECTION}",
        "",
        f"Per-step wall time of the demo training step (`perfsight.demo.train`: SmallCNN, SyntheticImages, "
        f"batch {args.batch}, SGD, DataLoader without workers) with profiling off and on. {args.rounds} rounds; each "
        f"round runs every configuration once, interleaved (the starting configuration rotates), each in a fresh "
        f"{'subprocess' if args.isolation == 'process' else 'profiler session in this process'} with a fresh "
        f"model and a fresh profiler writing to a temporary directory (deleted after). Each run trains "
        f"{args.steps} steps and profiles steps {args.first}-{args.last}; the {args.first} warm-up steps before "
        f"them are not reported, so every configuration has {n_profiled} timed steps per round "
        f"({args.rounds * n_profiled} in all).",
        "",
        "A step's time runs from fetching its batch to the return of the profiler's `step()`. The `step()` "
        "that ends the profiled range (stops tracing, post-processes the events, writes the trace) is a "
        "once-per-window cost shown as *stop+export*, not in that step's time; *setup* is making the "
        "`Profiler` (run directory, manifest, starting torch.profiler), *close* is `close()`. *overhead* "
        "compares pooled medians with `off`; *paired overhead* is, per round, the configuration's median step "
        "over the same round's `off` median, as the median and IQR over rounds (robust to load drifting "
        "between rounds).",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(HEADERS))) + "|",
    ]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    lines += ["", "Configurations:", ""]
    lines += [f"- `{r['config']}`: {r['label']}" for r in rows]
    lines += [
        "",
        f"Machine: {facts['cpu']}, {facts['cores']} cores ({facts['usable_cores']} usable), torch "
        f"{facts['torch']}, {facts['threads']} torch thread(s) (OMP_NUM_THREADS={facts['threads']}), Python "
        f"{facts['python']}, {facts['platform']}. Load average before / after: {data['load_before']} / "
        f"{data['load_after']}. Benchmark wall time: {data['wall_s']:.0f} s.",
        "",
        "Reproduce (from the repository root):",
        "",
        f"    {command_line(args)} --markdown",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds (default 12)")
    parser.add_argument("--steps", type=int, default=30, help="training steps per round (default 30)")
    parser.add_argument("--first", type=int, default=None, help="first profiled step (default 5, or 1 when "
                        "--steps < 10)")
    parser.add_argument("--last", type=int, default=None, help="last profiled step (default 24, clipped to "
                        "--steps - 1)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", type=lambda s: s.split(","), default=list(CONFIGS),
                        help="comma-separated subset of " + ",".join(CONFIGS))
    parser.add_argument("--isolation", choices=("process", "inprocess"), default="process",
                        help="a fresh subprocess per configuration-round (default) or all in this process")
    parser.add_argument("--markdown", action="store_true", help="print the RESULTS.md section")
    parser.add_argument("--json", metavar="PATH", help="also write the raw per-round data here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    return parser


def resolve_range(args, parser) -> None:
    if args.first is None:
        args.first = 5 if args.steps >= 10 else 1
    if args.last is None:
        args.last = min(24, args.steps - 1)
    if not 0 < args.first <= args.last < args.steps:
        parser.error("need 0 < --first <= --last < --steps (a warm-up step, then the profiled steps)")
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_range(args, parser)
    if args.child:
        result = run_round(args.child, steps=args.steps, first=args.first, last=args.last, batch=args.batch,
                           threads=args.threads, seed=args.seed)
        print(json.dumps(result))
        return 0
    if args.isolation == "inprocess":
        import torch
        torch.set_num_threads(args.threads)
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    data = run_all(args, progress)
    rows = summarise(data, args.configs)
    facts = machine_facts(args.threads)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "facts": facts, **data}, indent=1))
    if args.markdown:
        print(format_markdown(rows, facts, data, args))
    else:
        print(format_table(rows))
        print(f"\n{facts['cpu']}, {facts['cores']} cores, torch {facts['torch']}, {args.threads} thread(s), "
              f"{args.rounds} rounds x {args.last - args.first + 1} profiled steps, isolation {args.isolation}, "
              f"{data['wall_s']:.0f} s, load {data['load_before']} -> {data['load_after']}")
        print(f"reproduce: {command_line(args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
