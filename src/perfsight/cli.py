"""The ``perfsight`` command: argument parsing only; every command calls the Python API."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import textwrap

from perfsight import __version__
from perfsight.core.errors import OptionError, PerfsightError
from perfsight.options.export import EXPORT_FORMATS, STEP_MODEL_ID


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; a positive integer is required") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not positive; a positive integer is required")
    return value


def _model_id(text: str) -> int:
    """Model ids are torch.compile frame ids, which start at 0 (the seed's ids are positive)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; allowed: {STEP_MODEL_ID} (step mode) "
                                         "or a compiled graph id >= 0") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; allowed: {STEP_MODEL_ID} (step mode) "
                                         "or a compiled graph id >= 0")
    return value


def _on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: on, off")
    return text == "on"


def _key_value(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _add_export(sub) -> None:
    export = sub.add_parser("export", help="export a run's timeline or summaries (msprof export)",
                            description="Export the timeline or the summary files of one or more runs, "
                                        "as msprof.py export does. Unparsed runs are parsed on the fly.")
    kinds = export.add_subparsers(dest="export_kind", required=True, metavar="{timeline,summary}")
    for kind, text in (("timeline", "msprof_{ts}.json (a Chrome/Perfetto timeline), step_trace, task_time and "
                                    "msprof_tx timelines"),
                       ("summary", "step_trace, op_summary, op_statistic, api_statistic, runtime_api, "
                                   "acl_statistic, task_time, msprof_tx, pytorch_operator_view files")):
        p = kinds.add_parser(kind, help=text, description=f"Export {text}.")
        p.add_argument("-dir", "--collection-dir", dest="dir", required=True,
                       help="a PROF_ directory, a folder holding runs (also further down: runs/<job>/PROF_*), "
                            "or a torch.profiler trace file")
        p.add_argument("--iteration-id", type=_positive_int,
                       help="export this iteration only (goes with --model-id)")
        p.add_argument("--model-id", type=_model_id,
                       help=f"{STEP_MODEL_ID}: step mode (iteration = training step); other ids: "
                            "the id F of a torch.compile region 'Torch-Compiled Region: F/C' (graph mode)")
        p.add_argument("--iteration-count", type=_positive_int, help="number of iterations to export")
        if kind == "summary":
            p.add_argument("--format", choices=EXPORT_FORMATS, default="csv", help="summary file format")
        p.add_argument("--clear", nargs="?", const=True, default=False, type=_on_off, metavar="on|off",
                       help="remove the parsed-table cache after exporting (default off)")
        p.add_argument("--output", help="write to OUTPUT/<run>/ instead of the run's perfsight_output/")


def _add_cluster(sub) -> None:
    cluster = sub.add_parser("cluster", help="msprof-analyze's cluster outputs of a multi-rank job",
                             description="Write msprof-analyze's `cluster -m all` outputs "
                                         "(cluster_step_trace_time.csv, cluster_communication.json, "
                                         "cluster_communication_matrix.json, communication_group.json, "
                                         "cluster_analysis.db) of the job at DIR into OUT/cluster_analysis_output/, "
                                         "for Ascend and PyTorch GPU/CPU jobs alike.")
    cluster.add_argument("-d", "--profiling-path", dest="dir", required=True,
                         help="the job: a folder of its ranks' runs (or one run, or a folder of traces)")
    cluster.add_argument("-o", "--output-path", "--output", dest="output",
                         help="where cluster_analysis_output/ and the per-rank summaries (perfsight_cluster/) go "
                              "(default: DIR)")
    cluster.add_argument("--workers", type=_workers, metavar="N",
                         help="processes reading ranks at once (default: the machine's CPUs)")
    cluster.add_argument("--ray", nargs="?", const=True, default=None, metavar="ADDRESS",
                         help="read the ranks as Ray tasks: on the cluster at ADDRESS, else RAY_ADDRESS's, else a "
                              "local Ray (needs `pip install perfsight[ray]`; the job's folder on storage every "
                              "node sees)")
    cluster.add_argument("--light", action="store_true",
                         help="read each torch_npu rank's steps and communication only, as it reported them "
                              "(step_trace_time.csv, communication.json, communication_matrix.json: the files "
                              "msprof-analyze's cluster mode reads), not its trace, kernels or memory: kilobytes "
                              "a rank whatever its trace's size; other formats are read whole")


def _checked(convert, valid, expected: str):
    """An argparse type: ``convert(text)`` when that works and ``valid`` accepts it, else the error ``'TEXT':
    expected <expected>``."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not valid(value):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
        return value
    return parse


#: a rank to compare: a rank number, or the job's slowest
_rank = _checked(lambda text: text if text == "slowest" else int(text), lambda value: value == "slowest" or value >= 0,
                 "a rank number (0 or more) or 'slowest'")
#: a percentage for --fail-if-slower
_percent = _checked(float, lambda value: 0 <= value < 1000, "a percentage, 0 or more (5 for 5%)")


def _add_compare(sub) -> None:
    compare = sub.add_parser("compare", help="why is NEW slower (or faster) than BASE",
                             description="Compare two runs, traces or jobs (anything `perfsight analyse` reads, of "
                                         "any format): the step time with its noise and a verdict, the step "
                                         "breakdown, operators and kernels aligned by name and across frameworks, "
                                         "communication, memory and launch figures.")
    compare.add_argument("runs", nargs="*", metavar="BASE NEW",
                         help="BASE (the run, trace or job compared against), then NEW (the one compared); several "
                              "runs a side, so that the verdict weighs the run-to-run noise: BASE... -- NEW...")
    compare.add_argument("--base", action="append", default=[], metavar="RUN",
                         help="a run of BASE (repeatable; with --new, instead of BASE... -- NEW...)")
    compare.add_argument("--new", action="append", default=[], metavar="RUN", help="a run of NEW (repeatable)")
    compare.add_argument("--rank", type=_rank, metavar="R|slowest",
                         help="compare this rank of each job (a number, or 'slowest': each job's slowest rank)")
    compare.add_argument("--base-rank", type=_rank, metavar="R|slowest", help="BASE's rank (overrides --rank)")
    compare.add_argument("--new-rank", type=_rank, metavar="R|slowest", help="NEW's rank (overrides --rank)")
    compare.add_argument("--families", metavar="CSV",
                         help="more operator families to align by, tried before perfsight's (docs/compare.md)")
    compare.add_argument("--top", type=_positive_int, default=8,
                         help="operators and kernels listed that grew and that shrank (default 8)")
    compare.add_argument("--json", action="store_true", help="print the results as JSON for machines")
    compare.add_argument("-o", "--output", help="also write the tables as CSV files into this folder")
    compare.add_argument("--fail-if-slower", type=_percent, metavar="PCT",
                         help="exit 1 when NEW is slower than BASE by more than PCT percent beyond the noise (a "
                              "CI gate; the run-to-run noise with several runs a side, else the step-to-step "
                              "noise only), 0 otherwise")


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="profile an unmodified training or inference script",
                         description="Profile a program without changing it: perfsight run [options] -- "
                                     "python train.py args... Options may also come from PERFSIGHT_OPTIONS "
                                     "(JSON); flags given here win.")
    run.add_argument("-o", "--output", help="where PROF_ directories go (default: $PERFSIGHT_WORK_PATH or "
                                            "./perfsight_data)")
    run.add_argument("--steps", help="step range to profile, e.g. 10-11 (default: every step)")
    run.add_argument("--warmup-steps", type=int, help="profiler warm-up steps before the range")
    run.add_argument("--flush-every", type=int, help="write a trace window every N profiled steps (default 10: "
                     "memory stays bounded, data survives a kill; 0: one window)")
    run.add_argument("--on-demand", action="store_true", default=None,
                     help="arm instead of profiling (option on_demand): each step's time is recorded in the "
                          "output folder, and `perfsight capture OUTPUT` (or -O trigger=slow_step:K) profiles the "
                          "steps asked for")
    run.add_argument("--options", dest="options_json", help="options as a JSON object")
    run.add_argument("-O", "--option", dest="option_pairs", action="append", type=_key_value, default=[],
                     metavar="KEY=VALUE", help="any option (see `perfsight options`); repeatable")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")


def _ranks_list(text: str) -> list[int]:
    try:
        ranks = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of ranks; e.g. 0,1,7") from None
    if not ranks or min(ranks) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of ranks >= 0; e.g. 0,1,7")
    return ranks


def _add_capture(sub) -> None:
    capture = sub.add_parser("capture", help="profile some steps of a running armed job (perfsight run "
                                             "--on-demand)",
                             description="Ask the job armed in RUN_DIR (its output folder) to profile --steps steps "
                                         "on every rank (or --ranks), all starting at the same step, wait until "
                                         "they are captured, and say where they went. Exit code 2 when no armed "
                                         "job is there, a capture is already running, a rank refuses, or the job "
                                         "ends first.")
    capture.add_argument("run_dir", help="the armed job's output folder (its -o, $PERFSIGHT_WORK_PATH or "
                                         "./perfsight_data)")
    capture.add_argument("--steps", type=_positive_int, help="steps to profile (default: the job's capture_steps, "
                                                             "3 unless set)")
    capture.add_argument("--ranks", type=_ranks_list, metavar="R,...", help="only these ranks (default: every "
                                                                            "rank armed)")
    capture.add_argument("-O", "--option", dest="option_pairs", action="append", type=_key_value, default=[],
                         metavar="KEY=VALUE", help="a profiling option for this capture (see `perfsight "
                                                   "options`); repeatable")


def _compile_modes(text: str) -> list[str]:
    return [mode.strip() for mode in text.split(",") if mode.strip()]


def _add_tune(sub) -> None:
    from perfsight.tune.launch import TUNE_STEPS, VERIFY_STEPS, VERIFY_WARMUP
    from perfsight.tune.session import ORDERS

    tune = sub.add_parser(
        "tune", help="tune an unmodified training script into a tuning bank, or verify the bank end to end",
        description="\n".join((
            "After Ascend's AOE; the script runs unmodified:",
            "  perfsight tune --mode op -- python train.py args...        operator tuning (OPAT)",
            "  perfsight tune --mode subgraph -- python train.py args...  subgraph tuning (SGAT)",
            "  perfsight tune --mode step -- python train.py args...      step settings (optimizers, loaders)",
            "  perfsight tune --verify -- python train.py args...         the bank's end-to-end speed-up", "",
            textwrap.fill(
                "Tuning records the script's first --steps optimizer steps, then times every tunable operator "
                "signature on synthetic inputs against its candidates (op), or every region of the model (the "
                "module forwarded first) in eager and torch.compile variants, replaying its last recorded "
                "forward and backward (subgraph), or each optimizer that stepped in its for-loop, foreach and "
                "fused implementations and, when the steps waited on their batches, the DataLoader's workers "
                "(step). The winners go to the bank, the result file "
                "aoe_result_opat_*.json to $PERFSIGHT_WORK_PATH (or the working directory); the script then "
                "continues untuned to its end, so give it few steps. --verify does not tune: it times whole "
                "steps of the script, from optimizer step to optimizer step, alternately with and without the "
                f"bank (after the first step and {2 * VERIFY_WARMUP} warm-up steps), and says whether the bank "
                "wins end to end. Exit code: the script's when it fails, 2 when tuning or verifying could not be "
                "done, else 0. "
                "Settings also come from AOE_MODE (1 subgraph, 2 op), TUNE_BANK_PATH, REPEAT_TUNE; flags win.",
                width=100))),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    tune.add_argument("--mode", choices=("op", "subgraph", "step", "both"),
                      help="op: operator tuning (default; AOE_MODE=2); subgraph: subgraph tuning (AOE_MODE=1); "
                           "step: the step settings (each optimizer's for-loop, foreach or fused implementation; "
                           "the DataLoader's workers when the steps wait on their batches; TunableOp on a GPU); "
                           "both: all three, the step settings first, then subgraph and op as the seed advises "
                           "(see --order)")
    tune.add_argument("--order", choices=ORDERS, metavar="|".join(ORDERS),
                      help="with --mode both: which stage goes first (default subgraph,op: operators inside "
                           "compiled regions are then not operator-tuned)")
    tune.add_argument("--compile-modes", type=_compile_modes, metavar="MODE[,MODE]",
                      help="subgraph tuning: the torch.compile modes to try (default: each this PyTorch has of "
                           "default, max-autotune-no-cudagraphs, lite); fewer modes tune faster")
    tune.add_argument("--regions-only", action="store_true", default=None,
                      help="subgraph tuning: tune the model's regions only (default: the whole model first, then "
                           "its regions unless the whole model wins compiled)")
    tune.add_argument("--bank", help="the tuning bank directory (default $TUNE_BANK_PATH or "
                                     "~/.perfsight/tune_bank)")
    tune.add_argument("--repeat", action="store_true", default=None,
                      help="re-tune signatures the bank already holds (REPEAT_TUNE=True)")
    tune.add_argument("--verify", action="store_true",
                      help="do not tune: time whole steps of the script with and without the existing bank, "
                           "interleaved, and report the end-to-end speed-up")
    tune.add_argument("--steps", type=_positive_int,
                      help=f"tuning: optimizer steps to record (default {TUNE_STEPS}, the fewest that shows "
                           f"static shapes); --verify: steps to time, half with the bank, an even number from 4 "
                           f"(default {VERIFY_STEPS}; the script must make {1 + 2 * VERIFY_WARMUP} more)")
    tune.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")


def cmd_tune(args) -> int:
    from perfsight.tune.launch import TUNE_STEPS, VERIFY_STEPS, run_tuning, run_verify

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise OptionError("tune: no command given; usage: perfsight tune [--mode op|subgraph|step|both | --verify] "
                          "-- python train.py ...")
    if args.order is not None and args.mode != "both":
        raise OptionError(f"--order {args.order} goes with --mode both (given: --mode {args.mode or 'unset'})")
    if args.verify:
        tuning = [flag for flag, value in (("--mode", args.mode), ("--order", args.order), ("--repeat", args.repeat),
                                           ("--compile-modes", args.compile_modes),
                                           ("--regions-only", args.regions_only)) if value is not None]
        if tuning:
            raise OptionError(f"{tuning[0]} is not allowed with --verify, which does not tune; allowed with it: "
                              "--bank, --steps")
        code, status = run_verify(command, bank=args.bank, steps=args.steps or VERIFY_STEPS)
    else:
        code, status = run_tuning(command, mode=args.mode, order=args.order, bank=args.bank, repeat=args.repeat,
                                  steps=args.steps or TUNE_STEPS, compile_modes=args.compile_modes,
                                  whole=not args.regions_only)
    if "error" in status:
        lines = [f"{'verification' if args.verify else 'tuning'} not done: {status['error']}"]
    elif args.verify:
        lines = [status["text"], f"{status['timed_steps']} steps timed after {status['warmup_steps']} warm-up "
                                 f"steps, in this order: {', '.join(status['order'])}"]
    else:
        from perfsight.views.terminal import print_tuning

        print_tuning(status)
        lines = []
    for line in lines:
        print(f"perfsight: {line}", file=sys.stderr)
    return code or (2 if "error" in status else 0)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; allowed: 1-65535") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range; allowed: 1-65535")
    return value


def _add_insight(sub) -> None:
    insight = sub.add_parser("insight", help="serve the web UI over the runs under a folder",
                             description="Serve perfsight insight, the local web UI (MindSpore Insight's "
                                         "performance pages) over every run found under --summary-base-dir. "
                                         "Runs are parsed once, in the background, and cached beside them.")
    insight.add_argument("--summary-base-dir", required=True, help="the folder holding the runs (searched "
                                                                   "recursively; new runs appear by themselves)")
    insight.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    insight.add_argument("--port", type=_port, default=8080, help="port (default 8080)")
    insight.add_argument("--allow-remote", action="store_true",
                         help="allow a --host that is not loopback (the UI has no authentication)")
    insight.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                         help="another name browsers call the server by (a DNS name of this machine); requests "
                              "naming neither it nor the address served are refused (repeatable)")
    insight.add_argument("--workers", type=_positive_int, default=1, help="runs parsed at once (default 1)")
    insight.add_argument("--open", dest="open_browser", action="store_true", help="open it in the web browser")


def cmd_insight(args) -> int:
    from perfsight.views.insight.server import serve

    serve(args.summary_base_dir, host=args.host, port=args.port, allow_remote=args.allow_remote,
          allowed_hosts=args.allowed_host, open_browser=args.open_browser, workers=args.workers)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfsight", description="Profile, analyse and show deep-learning "
                                     "training and inference.")
    parser.add_argument("--version", action="version", version=f"perfsight {__version__}")
    sub = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="profile the bundled small CNN and show the results",
                          description="Train a small bundled CNN on synthetic data with profiling on, export "
                                      "the run and print a short summary.")
    demo.add_argument("-o", "--output", default="perfsight_demo", help="output directory (default ./perfsight_demo)")
    demo.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    _add_run(sub)
    _add_capture(sub)
    _add_tune(sub)
    analyse = sub.add_parser("analyse", aliases=["analyze"], help="print the analyses of a run or trace",
                             description="Analyse a perfsight run, a PROF_ directory or parent, a torch.profiler "
                                         "trace or a folder of them (one per rank), and print a report.")
    analyse.add_argument("path", help="run directory, trace file, or folder of runs/traces")
    analyse.add_argument("--json", action="store_true", help="print the results as JSON for machines")
    analyse.add_argument("--top", type=_positive_int, default=10, help="operators to list (default 10)")
    analyse.add_argument("--critical-path", action="store_true",
                         help="show what bounds each step: its critical path by category, the longest pieces of "
                              "the median step's path, and what-ifs (communication overlapped, no launch "
                              "overhead, ...)")
    analyse.add_argument("--step", type=int, help="with --critical-path: only this step (ProfilerStep#N)")
    analyse.add_argument("--rank", type=int, help="with --critical-path: only this rank")
    _add_export(sub)
    _add_cluster(sub)
    _add_compare(sub)
    _add_insight(sub)
    sub.add_parser("options", help="list every profiling option, its aliases, range and default",
                   description="List every option perfsight accepts (PERFSIGHT_OPTIONS, PROFILING_OPTIONS, "
                               "MS_PROFILER_OPTIONS and profileConfig names).")
    return parser


def _run_options(args) -> dict:
    from perfsight.options import load_json_object

    given: dict = {}
    for name, text in (("PERFSIGHT_OPTIONS", os.environ.get("PERFSIGHT_OPTIONS", "").strip()),
                       ("--options", args.options_json)):
        if text:
            given.update(load_json_object(name, text))
    for flag in ("output", "steps", "warmup_steps", "flush_every", "on_demand"):
        if getattr(args, flag) is not None:
            given[flag] = getattr(args, flag)
    given.update(dict(args.option_pairs))
    return given


def cmd_run(args) -> int:
    from perfsight.collect.launch import run_profiled

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise OptionError("run: no command given; usage: perfsight run [options] -- python train.py ...")
    code, runs, armed = run_profiled(command, _run_options(args))
    for line in [run.report for run in runs] + armed:
        print(f"perfsight: {line}", file=sys.stderr)
    if not runs and not armed:
        print("perfsight: no run was collected (did the command start Python with torch?)", file=sys.stderr)
    return code


def _with_progress(path: str, work, runs=None):
    """Run ``work()`` under a progress bar (on stderr, when it is a terminal: elsewhere it would leave an empty
    line) over the bytes of the raw files of ``runs`` (default: the runs ``ingest.find_runs`` finds at ``path``)."""
    from pathlib import Path

    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    from perfsight.ingest import find_runs
    from perfsight.ingest.common import progress

    runs = find_runs(Path(path)) if runs is None else runs
    total = sum(p.stat().st_size for run in runs for p in run.sources() if p.is_file())
    columns = (TextColumn("reading"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    console = Console(stderr=True)
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("reading", total=total)
        with progress.reporting(lambda nbytes: bar.advance(task, nbytes)):
            return work()


def cmd_export(args) -> int:
    from perfsight.views.export import Selection, export_runs, find_export_runs

    runs = find_export_runs(args.dir)
    selection = Selection(iteration_id=args.iteration_id, model_id=args.model_id,
                          iteration_count=args.iteration_count)
    results = _with_progress(args.dir, lambda: export_runs(
        runs, timeline=args.export_kind == "timeline", summary=args.export_kind == "summary",
        fmt=getattr(args, "format", "csv"), selection=selection, clear=args.clear, output=args.output), runs=runs)
    for run, files in results.items():
        print(f"{run}:")
        for path in files:
            print(f"  {path}")
        if not files:
            print("  (no data to export)")
    return 0


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--workers {text!r}: expected a whole number of processes, 1 or more")
    return value


@contextlib.contextmanager
def _rank_progress():
    """A progress bar over a job's ranks (on stderr, when it is a terminal) counting the ranks done, cached and
    failed; yields the (on_start, on_outcome) callbacks of ``perfsight.mapreduce.analyse_job``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    counts = {"done": 0, "cached": 0, "failed": 0}
    columns = (TextColumn("ranks"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("", total=None)

        def arrived(outcome) -> None:
            counts[outcome.status] += 1
            bar.update(task, advance=1, description=", ".join(f"{n} {status}" for status, n in counts.items()))

        yield (lambda ranks: bar.update(task, total=ranks)), arrived


def _say(message: str) -> None:
    """A line to the user on stderr (stdout may be JSON): what perfsight is waiting for, and why."""
    print(f"perfsight: {message}", file=sys.stderr)


def cmd_cluster(args) -> int:
    from perfsight.views.export import cluster
    from perfsight.views.terminal import print_cluster_report

    with _rank_progress() as (on_start, on_outcome):
        report = cluster(args.dir, args.output, ray=args.ray, workers=args.workers, on_start=on_start,
                         on_outcome=on_outcome, bound_memory=True, light=args.light, on_wait=_say)
    print_cluster_report(report)
    return 0


def cmd_demo(args) -> int:
    from perfsight.analysis.summary import run_summary
    from perfsight.core.memo import computed
    from perfsight.demo.driver import run_demo
    from perfsight.run import open as open_run
    from perfsight.views.terminal import print_run_summary

    run_dir, written = run_demo(args.output, args.steps)
    print_run_summary(run_dir, computed(run_summary, open_run(run_dir).tables), written)
    return 0


def _analyse_by_rank(args) -> int:
    """``perfsight analyse`` of a job of more than ``WHOLE_JOB_RANKS`` ranks: mapped rank by rank (its ranks
    compared), never merged whole."""
    from pathlib import Path

    from perfsight.analysis.summary import cluster_summary
    from perfsight.core.memo import computed
    from perfsight.mapreduce import analyse_job, holding_store, output_root
    from perfsight.views import jsonable as json_report
    from perfsight.views.export.cluster_analysis import ClusterReport
    from perfsight.views.terminal import print_cluster_report

    path = Path(args.path)
    with holding_store(output_root(path), _say), _rank_progress() as (on_start, on_outcome):
        job = analyse_job(path, on_start=on_start, on_outcome=on_outcome, bound_memory=True)
        summary = computed(cluster_summary, job.job)
    if args.json:
        print(json_report.dumps({"path": str(job.path), "ranks": job.ranks, "cluster": summary,
                                 "failed": [{"source": o.name, "error": o.error} for o in job.failed]}))
    else:
        print_cluster_report(ClusterReport(job, summary, None))
    return 0


def _critical_path(run, args) -> int:
    """``perfsight analyse --critical-path``: ``summary.critical_path_summary``, printed or as JSON."""
    from perfsight.analysis.summary import critical_path_summary
    from perfsight.core.memo import computed
    from perfsight.views import jsonable as json_report
    from perfsight.views.terminal import print_critical_path

    summary = computed(critical_path_summary, run.tables, step=args.step, rank=args.rank)
    if args.json:
        print(json_report.dumps({"path": str(run.path), "ranks": run.ranks, "critical_path": summary}))
    else:
        print_critical_path(str(run.path), summary)
    return 0


def cmd_analyse(args) -> int:
    from pathlib import Path

    from perfsight.analysis.summary import run_summary
    from perfsight.core.memo import computed
    from perfsight.ingest import find_runs
    from perfsight.mapreduce import WHOLE_JOB_RANKS
    from perfsight.run import open as open_run
    from perfsight.views import jsonable as json_report
    from perfsight.views.terminal import print_summary

    if len(find_runs(Path(args.path))) > WHOLE_JOB_RANKS:
        return _analyse_by_rank(args)
    run = _with_progress(args.path, lambda: open_run(args.path))
    if args.critical_path:
        return _critical_path(run, args)
    summary = computed(run_summary, run.tables, top=args.top)
    if args.json:
        advice = json_report.with_json_columns(summary["advice"], ["evidence"])
        print(json_report.dumps({"path": str(run.path), "ranks": run.ranks, **summary, "advice": advice}))
    else:
        print_summary(str(run.path), summary)
    return 0


#: how ``perfsight compare`` is given its runs, said when they do not add up
COMPARE_USAGE = "perfsight compare BASE NEW, BASE... -- NEW..., or --base RUN --new RUN (each repeatable)"


def _new_runs_flagged(argv: list[str]) -> list[str]:
    """``perfsight compare BASE... -- NEW...``: the runs after ``--`` given as ``--new`` (argparse drops the
    ``--`` and would take them for more of BASE's)."""
    if argv[:1] != ["compare"] or "--" not in argv:
        return argv
    cut = argv.index("--")
    return argv[:cut] + [f"--new={run}" for run in argv[cut + 1:]]


def _compared_runs(args) -> tuple[list[str], list[str]]:
    """BASE's and NEW's runs: ``BASE NEW``; the runs without a flag on the side not given by flag (``BASE...
    -- NEW...`` gives NEW's as ``--new``); or ``--base`` and ``--new`` alone."""
    if args.base and args.new and args.runs:
        raise OptionError(f"compare: runs given with --base and --new and without a flag; usage: {COMPARE_USAGE}")
    if args.new:
        base, new = args.base + args.runs, args.new
    elif args.base:
        base, new = args.base, args.runs
    else:
        base, new = (args.runs[:1], args.runs[1:]) if len(args.runs) == 2 else ([], [])
    if not base or not new:
        raise OptionError(f"compare: give BASE and NEW ({len(args.runs)} given without a flag); usage: "
                          f"{COMPARE_USAGE}")
    flags = [run for run in new if run.startswith("-")]
    if flags:
        raise OptionError(f"compare: {flags[0]} after --, where NEW's runs are: options go before -- (a run named "
                          f"so: ./{flags[0]})")
    return base, new


def cmd_compare(args) -> int:
    from perfsight.comparison import compare
    from perfsight.views import jsonable as json_report
    from perfsight.views.export.compare_files import comparison_report, write_comparison
    from perfsight.views.terminal import print_comparison

    base_rank = args.base_rank if args.base_rank is not None else args.rank
    new_rank = args.new_rank if args.new_rank is not None else args.rank
    comparison = compare(*_compared_runs(args), base_rank=base_rank, new_rank=new_rank, families=args.families)
    report = comparison_report(comparison, fail_if_slower=args.fail_if_slower)
    if args.output:
        report["files"] = [str(path) for path in write_comparison(comparison, args.output)]
    if args.json:
        print(json_report.dumps(report))
    else:
        print_comparison(report, top=args.top)
    return 1 if report.get("gate", {}).get("failed") else 0


def cmd_capture(args) -> int:
    from pathlib import Path

    from perfsight.collect.capture import capture
    from perfsight.views.terminal import capture_progress, print_captured

    try:
        with capture_progress() as on_progress:
            captured = capture(Path(args.run_dir), steps=args.steps, ranks=args.ranks,
                               options=dict(args.option_pairs), on_progress=on_progress)
    except KeyboardInterrupt:
        print("perfsight: capture interrupted; its request is withdrawn (a capture a rank had begun runs to its "
              "end)", file=sys.stderr)
        return 130
    print_captured(captured)
    return 0


def cmd_options(args) -> int:
    from perfsight.options import describe
    from perfsight.views.terminal import print_options

    print_options(describe())
    return 0


COMMANDS = {"run": cmd_run, "capture": cmd_capture, "tune": cmd_tune, "export": cmd_export, "cluster": cmd_cluster,
            "demo": cmd_demo, "options": cmd_options, "analyse": cmd_analyse, "analyze": cmd_analyse,
            "insight": cmd_insight, "compare": cmd_compare}


READS_TRACES = ("analyse", "analyze", "export", "cluster", "insight", "compare")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(_new_runs_flagged(sys.argv[1:] if argv is None else argv))
    if args.command_name in READS_TRACES:
        from perfsight.core.process import prepare

        prepare()
    try:
        return COMMANDS[args.command_name](args)
    except PerfsightError as exc:
        print(f"perfsight: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
