"""Collection overhead of perfsight (issue 2): per-step time of the demo model with profiling off and on.

Configurations (each a fresh model, optimizer, DataLoader and profiler per run):

    off       no profiler
    l0        perfsight.Profiler(task_time="l0")              timing only, no shapes
    l1        perfsight.Profiler(task_time="l1")              timing + shapes, dtypes, FLOPs (the default)
    l1_full   perfsight l1 + profile_memory + with_stack
    torch     plain torch.profiler.profile(record_shapes=True, with_flops=True): the torch settings of l1,
              with a chrome-trace export as on_trace_ready; what perfsight wraps, for reference

The step is the demo's training step (perfsight.demo.train: SmallCNN on SyntheticImages, batch 32, SGD,
DataLoader with num_workers=0): fetch the batch, forward, loss, backward, optimizer step, then the profiler's
``step()``. Its time runs from fetching the batch to the return of ``step()``, as wall time and as the
process's CPU time. Each run trains ``--steps`` steps and profiles steps ``--first``..``--last`` (default
5-24 of 30); only those steps are reported, the warm-up steps before them are not. The ``step()`` that ends
the profiled range stops tracing, post-processes the events and writes the trace file: a once-per-window
cost, left out of the last step's time and reported on its own ("stop+export"), as are making the profiler
("setup"), ``close()`` and the run's peak RSS.

Method (the machine is shared and noisy): torch pinned to one thread, configurations interleaved round by
round (the starting configuration rotates each round so none always runs first), every configuration-round
in a fresh Python subprocess by default. ``--isolation inprocess`` repeats the profiler sessions in one
process instead; measured, that distorts the results (see ISOLATION_NOTE). Reported: the median and p10-p90
of the per-step times pooled over rounds, the overhead of the pooled median against "off", and a paired
overhead: per round, the configuration's median step over the same round's "off" median, summarised as the
median and IQR over rounds (robust to machine load drifting between rounds).

    PYTHONPATH=src python bench/collect_overhead.py                 # tables (default: 12 rounds, ~4 min)
    PYTHONPATH=src python bench/collect_overhead.py --markdown      # the bench/RESULTS.md section
    PYTHONPATH=src python bench/collect_overhead.py --rounds 1 --steps 4    # smoke run (profiles steps 1-3)
    PYTHONPATH=src python bench/collect_overhead.py --from-json raw.json --markdown   # a saved run, again

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

from stats import load_average, quantile  # bench/stats.py (scripts here import their siblings)

CONFIGS = {
    "off": "profiling off",
    "l0": 'perfsight, `task_time="l0"` (timing only: no shapes, no FLOPs)',
    "l1": 'perfsight, `task_time="l1"`, the default (timing + shapes, dtypes, FLOPs)',
    "l1_full": "perfsight l1 + `profile_memory=True` + `with_stack=True`",
    "torch": "plain `torch.profiler.profile(record_shapes=True, with_flops=True)` with the same schedule and a "
             "chrome-trace export (the torch settings of l1, without perfsight)",
}
#: (numerator, denominator) pairs compared round by round, besides every configuration against "off"
COMPARISONS = (("l1", "l0"), ("l1", "torch"), ("l1_full", "l1"))
SECTION = "Collection overhead (issue 2)"

#: glibc malloc settings of --malloc pinned: no dynamic mmap threshold, no trimming (see MALLOC_NOTE)
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024), "MALLOC_TRIM_THRESHOLD_": str(1024 ** 3)}

MALLOC_NOTE = (
    "Why `--malloc pinned` by default: with glibc's adaptive defaults, identical `off` runs (30 steps, each "
    "in a fresh process) land in two regimes, median steps of 10.6 ms with 64k minor page faults or 14.2-14.8 "
    "ms with 130-138k (intermediate runs in between), most likely glibc's dynamic mmap threshold deciding "
    "per process whether the multi-megabyte activation tensors are mmapped and unmapped (and faulted in "
    "again) every step. That noise has nothing to do with profiling and swamps the differences between "
    "configurations, so the children run with the threshold pinned (`MALLOC_MMAP_THRESHOLD_=33554432`, "
    "`MALLOC_TRIM_THRESHOLD_=1073741824`): six `off` runs then gave 10.1-10.9 ms, 61-63k faults. "
    "`--malloc default` measures with glibc's defaults, as a user's run would be.")

ISOLATION_NOTE = (
    "Why a subprocess per run: measured with `--isolation inprocess` (all sessions in one process), repeated "
    "torch.profiler sessions distort the step times. Twelve back-to-back l1 sessions (20 steps, 10 profiled) in "
    "one process gave median steps of 16.6 and 16.2 ms for the first two, then alternating between slow "
    "(30-44 ms) and fast (11-12 ms) sessions; the slow ones spend 3-4x the system CPU time (0.25 s against "
    "0.07 s) on ~45k instead of ~15k minor page faults, with no Python garbage collection running, and "
    "peak RSS grows by 13-100 MB per session. Plain "
    "torch.profiler does the same, so it is torch's (memory handling after a session), not perfsight's; but "
    "it would charge a later configuration for an earlier one's session, so every configuration-round runs in "
    "a fresh interpreter (~3 s of imports each, which bounds the number of rounds).")


# --- one configuration-round ------------------------------------------------------------------------------


def run_round(config: str, *, steps: int, first: int, last: int, batch: int, threads: int, seed: int) -> dict:
    """Train ``steps`` steps under ``config``; per-step wall and CPU times in seconds, and the one-off costs."""
    import torch
    import torch.profiler  # noqa: F401
    from torch import nn
    from torch.utils.data import DataLoader

    import perfsight  # noqa: F401 - imported before timing: setup is making the profiler, not importing it
    from perfsight.demo.train import SmallCNN, SyntheticImages

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(SyntheticImages(steps * batch), batch_size=batch, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model.train()

    wall, cpu = time.perf_counter, time.process_time
    out_dir = tempfile.mkdtemp(prefix=f"perfsight-bench-{config}-")
    try:
        t0 = wall()
        prof = _make_profiler(config, out_dir, first, last)
        setup = wall() - t0

        work, hook, work_cpu, hook_cpu = [], [], [], []
        batches = iter(loader)
        for _ in range(steps):
            t0, c0 = wall(), cpu()
            images, labels = next(batches)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            t1, c1 = wall(), cpu()
            if prof is not None:
                prof.step()
            t2, c2 = wall(), cpu()
            work.append(t1 - t0)
            hook.append(t2 - t1)
            work_cpu.append(c1 - c0)
            hook_cpu.append(c2 - c1)

        t0 = wall()
        if prof is not None:
            _close(config, prof)
        close = wall() - t0
        traces = list(Path(out_dir).rglob("*.pt.trace.json"))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)

    def step_times(main, tail):   # the step() ending the range is stop+export, not part of that step
        return [main[i] + (tail[i] if i != last else 0.0) for i in range(first, last + 1)]

    return {"config": config, "step_s": step_times(work, hook), "step_cpu_s": step_times(work_cpu, hook_cpu),
            "export_s": hook[last], "setup_s": setup, "close_s": close,
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


def _child_env(threads: int, malloc: str = "pinned") -> dict:
    env = dict(os.environ)
    for name, value in PINNED_MALLOC.items():
        if malloc == "pinned":
            env[name] = value
        else:
            env.pop(name, None)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    for name in ("PERFSIGHT_OPTIONS", "PROFILING_OPTIONS", "MS_PROFILER_OPTIONS"):
        env.pop(name, None)   # a profiler switched on from the environment would skew every configuration
    return env


def run_in_subprocess(config: str, args) -> dict:
    done = subprocess.run(_child_command(config, args), capture_output=True, text=True,
                          env=_child_env(args.threads, args.malloc))
    if done.returncode != 0:
        raise RuntimeError(f"{config} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_all(args, progress=None) -> dict:
    configs = args.configs
    rounds: list[dict[str, dict]] = []
    started = time.perf_counter()
    load_before = load_average()
    for r in range(args.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        results = {}
        for config in order:
            if args.isolation == "process":
                results[config] = run_in_subprocess(config, args)
            else:
                results[config] = run_round(config, steps=args.steps, first=args.first, last=args.last,
                                            batch=args.batch, threads=args.threads, seed=args.seed)
        rounds.append(results)
        if progress:
            progress(f"round {r + 1}/{args.rounds} ({time.perf_counter() - started:.0f} s), median ms/step: "
                     + "  ".join(f"{c} {1e3 * statistics.median(results[c]['step_s']):.2f}" for c in configs))
    return {"rounds": rounds, "isolation": args.isolation, "wall_s": time.perf_counter() - started,
            "load_before": load_before, "load_after": load_average()}


# --- statistics -------------------------------------------------------------------------------------------


def _paired(rounds, a: str, b: str, key: str) -> dict:
    """Per round, median(a) / median(b) - 1 in percent; the median and IQR over rounds."""
    ratios = [100 * (statistics.median(r[a][key]) / statistics.median(r[b][key]) - 1) for r in rounds]
    return {"median": statistics.median(ratios), "q1": quantile(ratios, 0.25), "q3": quantile(ratios, 0.75),
            "wins": sum(x > 0 for x in ratios), "n": len(ratios)}


def summarise(data: dict, configs: list[str]) -> dict:
    rounds = data["rounds"]
    steps, once = [], []
    base = {key: statistics.median(t for r in rounds for t in r["off"][key]) if "off" in configs else None
            for key in ("step_s", "step_cpu_s")}
    for c in configs:
        row = {"config": c, "label": CONFIGS[c]}
        for key, name in (("step_s", "wall"), ("step_cpu_s", "cpu")):
            times = [t for r in rounds for t in r[c][key]]
            row[name] = {"n": len(times), "median": 1e3 * statistics.median(times),
                         "p10": 1e3 * quantile(times, 0.10), "p90": 1e3 * quantile(times, 0.90)}
            if base[key] and c != "off":
                row[name]["overhead"] = 100 * (statistics.median(times) / base[key] - 1)
                row[name]["paired"] = _paired(rounds, c, "off", key)
        steps.append(row)
        if c != "off":
            once.append({"config": c, **{k: 1e3 * statistics.median(r[c][f"{k}_s"] for r in rounds)
                                         for k in ("setup", "export", "close")},
                         "rss_mb": (statistics.median(r[c]["peak_rss_mb"] for r in rounds)
                                    if data["isolation"] == "process" else None),
                         "trace_files": min(r[c]["trace_files"] for r in rounds)})
    off_rss = (statistics.median(r["off"]["peak_rss_mb"] for r in rounds)
               if "off" in configs and data["isolation"] == "process" else None)
    comparisons = [{"a": a, "b": b, "wall": _paired(rounds, a, b, "step_s"), "cpu": _paired(rounds, a, b, "step_cpu_s")}
                   for a, b in COMPARISONS if a in configs and b in configs]
    return {"steps": steps, "once": once, "off_rss_mb": off_rss, "comparisons": comparisons}


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
            "python": platform.python_version(), "platform": platform.platform(), "threads": threads,
            "libc": " ".join(platform.libc_ver()).strip() or "?"}


# --- output -----------------------------------------------------------------------------------------------

STEP_HEADERS = ["config", "wall ms/step", "p10-p90", "overhead", "paired overhead [IQR]", "CPU ms/step",
                "CPU paired overhead [IQR]"]
ONCE_HEADERS = ["config", "setup ms", "stop+export ms", "close ms", "peak RSS MB"]
COMPARE_HEADERS = ["comparison", "wall, paired [IQR]", "CPU, paired [IQR]", "rounds a > b (wall, CPU)"]


def _pp(stat: dict | None) -> str:
    if not stat:
        return "-"
    return f"{stat['median']:+.1f}% [{stat['q1']:+.1f}, {stat['q3']:+.1f}]"


def step_cells(row: dict) -> list[str]:
    w, c = row["wall"], row["cpu"]
    return [row["config"], f"{w['median']:.2f}", f"{w['p10']:.2f}-{w['p90']:.2f}",
            f"{w['overhead']:+.1f}%" if "overhead" in w else "-", _pp(w.get("paired")), f"{c['median']:.2f}",
            _pp(c.get("paired"))]


def once_cells(row: dict) -> list[str]:
    return [row["config"], f"{row['setup']:.1f}", f"{row['export']:.1f}", f"{row['close']:.1f}",
            "-" if row["rss_mb"] is None else f"{row['rss_mb']:.0f}"]


def compare_cells(row: dict) -> list[str]:
    return [f"{row['a']} vs {row['b']}", _pp(row["wall"]), _pp(row["cpu"]),
            f"{row['wall']['wins']}/{row['wall']['n']}, {row['cpu']['wins']}/{row['cpu']['n']}"]


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    table = [headers] + rows
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
             for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(headers) + " |", "|" + "|".join("---" if i == 0 else "---:"
                                                             for i in range(len(headers))) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows])


def command_line(args) -> str:
    parts = ["PYTHONPATH=src python bench/collect_overhead.py"]
    parser = build_parser()
    defaults = parser.parse_args([])
    resolve_range(defaults, parser)
    for name in ("rounds", "steps", "first", "last", "batch", "threads", "seed", "isolation", "malloc"):
        if getattr(args, name) != getattr(defaults, name):
            parts.append(f"--{name} {getattr(args, name)}")
    if args.configs != defaults.configs:
        parts.append("--configs " + ",".join(args.configs))
    return " ".join(parts)


def format_text(summary: dict, facts: dict, data: dict, args) -> str:
    out = [text_table(STEP_HEADERS, [step_cells(r) for r in summary["steps"]]), "",
           text_table(ONCE_HEADERS, [once_cells(r) for r in summary["once"]])]
    if summary["comparisons"]:
        out += ["", text_table(COMPARE_HEADERS, [compare_cells(r) for r in summary["comparisons"]])]
    out += ["", f"{facts['cpu']}, {facts['cores']} cores, torch {facts['torch']}, {args.threads} thread(s), "
                f"{args.rounds} rounds x {args.last - args.first + 1} profiled steps (steps {args.first}-{args.last}"
                f" of {args.steps}), isolation {args.isolation}, malloc {args.malloc}, {data['wall_s']:.0f} s, "
                f"load average {data['load_before']} -> {data['load_after']}",
            f"reproduce: {command_line(args)}"]
    return "\n".join(out)


def format_markdown(summary: dict, facts: dict, data: dict, args) -> str:
    n_profiled = args.last - args.first + 1
    where = ("a fresh Python subprocess" if args.isolation == "process"
             else "one Python process (`--isolation inprocess`: NOT the recommended method, see below)")
    rss = f" (`off`: {summary['off_rss_mb']:.0f} MB)" if summary["off_rss_mb"] else ""
    malloc = ("with its mmap and trim thresholds pinned (see below)" if args.malloc == "pinned"
              else "with its adaptive defaults (`--malloc default`)")
    lines = [
        f"## {SECTION}",
        "",
        f"What profiling costs the bundled demo's training step (`perfsight.demo.train`: SmallCNN on "
        f"SyntheticImages, batch {args.batch}, SGD, DataLoader without workers). Produced by "
        f"`bench/collect_overhead.py`; a benchmark, not a test.",
        "",
        "Configurations:",
        "",
        *[f"- `{c}`: {CONFIGS[c]}" for c in args.configs],
        "",
        f"Method: {args.rounds} rounds; each round runs every configuration once, interleaved (the starting "
        f"configuration rotates each round), each run in {where} with a fresh model and a fresh profiler writing "
        f"to a temporary directory (deleted after). torch is pinned to {args.threads} thread(s) "
        f"(`torch.set_num_threads`, `OMP_NUM_THREADS`), glibc malloc {malloc}. Each run trains {args.steps} steps "
        f"and profiles steps {args.first}-{args.last}; the {args.first} warm-up steps before them are not "
        f"reported, so each configuration has {n_profiled} timed steps per round "
        f"({args.rounds * n_profiled} in all). A step runs "
        f"from fetching its batch to the return of the profiler's `step()`, measured as wall time and as the "
        f"process's CPU time (`time.process_time`, which leaves out time spent waiting for a core). "
        f"*overhead* compares the pooled median with `off`; *paired overhead* is, per round, the "
        f"configuration's median step over the same round's `off` median, given as the median and IQR over "
        f"the {args.rounds} rounds (robust to load drifting between rounds).",
        "",
        "Per step (profiled steps only):",
        "",
        *markdown_table(STEP_HEADERS, [step_cells(r) for r in summary["steps"]]),
        "",
        f"Once per run: *setup* is making the profiler (perfsight: run directory, manifest, device facts, "
        f"starting torch.profiler; imports excluded); *stop+export* is the `step()` that ends the profiled "
        f"range ({n_profiled} steps: stops tracing, post-processes the events, writes the trace), left out of "
        f"that step's time above; *close* is `close()`; *peak RSS* is the run's peak resident memory{rss}.",
        "",
        *markdown_table(ONCE_HEADERS, [once_cells(r) for r in summary["once"]]),
    ]
    if summary["comparisons"]:
        lines += [
            "",
            "Paired comparisons between profiled configurations (per round, median step of a over median step "
            "of b; median and IQR over rounds; and in how many rounds a was slower):",
            "",
            *markdown_table(COMPARE_HEADERS, [compare_cells(r) for r in summary["comparisons"]]),
        ]
    lines += [
        "",
        f"Machine: {facts['cpu']}, {facts['cores']} cores ({facts['usable_cores']} usable), torch {facts['torch']}, "
        f"{facts['threads']} torch thread(s), Python {facts['python']}, {facts['platform']} ({facts['libc']}). "
        f"Load average (1, 5, 15 min) before / after: {data['load_before']} / {data['load_after']}. "
        f"Benchmark wall time: {data['wall_s']:.0f} s.",
        "",
        ISOLATION_NOTE,
        "",
        MALLOC_NOTE,
        "",
        "Reproduce (from the repository root):",
        "",
        f"    {command_line(args)} --markdown",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds (default 12)")
    parser.add_argument("--steps", type=int, default=30, help="training steps per run (default 30)")
    parser.add_argument("--first", type=int, default=None,
                        help="first profiled step (default 5, or 1 when --steps < 10)")
    parser.add_argument("--last", type=int, default=None,
                        help="last profiled step (default 24, clipped to --steps - 1)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", type=lambda s: s.split(","), default=list(CONFIGS),
                        help="comma-separated subset of " + ",".join(CONFIGS))
    parser.add_argument("--isolation", choices=("process", "inprocess"), default="process",
                        help="a fresh subprocess per configuration-round (default) or every run in this process")
    parser.add_argument("--malloc", choices=("pinned", "default"), default="pinned",
                        help="glibc malloc in the subprocesses: mmap/trim thresholds pinned (default; less noise) "
                        "or glibc's adaptive defaults")
    parser.add_argument("--markdown", action="store_true", help="print the bench/RESULTS.md section")
    parser.add_argument("--json", metavar="PATH", help="also write the raw per-round data here")
    parser.add_argument("--from-json", metavar="PATH",
                        help="run nothing: print the tables (or, with --markdown, the section) of an earlier run's "
                        "--json output")
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
    if args.child and args.child not in CONFIGS:
        parser.error(f"unknown configuration {args.child}")


def saved_run(args, parser) -> tuple[argparse.Namespace, dict, dict, dict]:
    """The arguments (with this call's ``--markdown``), summary, machine facts and data of the earlier run
    whose ``--json`` output ``args.from_json`` names."""
    try:
        saved = json.loads(Path(args.from_json).read_text())
        earlier = argparse.Namespace(**{**saved["args"], "markdown": args.markdown})
        return earlier, saved["summary"], saved["facts"], saved
    except (OSError, ValueError, TypeError, KeyError) as error:
        parser.error(f"--from-json {args.from_json}: not the --json output of this benchmark ({error!r})")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_range(args, parser)
    if args.child:
        result = run_round(args.child, steps=args.steps, first=args.first, last=args.last, batch=args.batch,
                           threads=args.threads, seed=args.seed)
        print(json.dumps(result))
        return 0
    if args.from_json:
        args, summary, facts, data = saved_run(args, parser)
    else:
        if args.isolation == "inprocess":
            import torch
            torch.set_num_threads(args.threads)
        progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
        data = run_all(args, progress)
        summary = summarise(data, args.configs)
        facts = machine_facts(args.threads)
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "facts": facts, "summary": summary, **data}))
    print(format_markdown(summary, facts, data, args) if args.markdown else format_text(summary, facts, data, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
