"""Tuning two bundled models (issue 6): tuning time, and the end-to-end training step with the tuned bank
against the untuned model.

The models (tiny, for a 2-core CPU; sizes are flags):

    cnn          a depthwise separable CNN: conv stem, blocks of depthwise 3x3 conv + BatchNorm + ReLU and
                 pointwise 1x1 conv + BatchNorm + ReLU, global pooling, linear head; synthetic images
    transformer  a pre-norm transformer encoder: token embedding, blocks of attention
                 (F.scaled_dot_product_attention) and an MLP (linear, GELU, linear), linear head; synthetic
                 tokens

Each trains with the optimizer people use for it: the cnn with SGD and momentum, the transformer with AdamW.

For each model and each of ``--modes`` (op, subgraph, step, both; default both: the step settings - the
optimizer's implementation - then subgraph tuning, then operator tuning, the seed's order): one training step
(zero_grad, forward, cross-entropy, backward, optimizer step) is tuned with ``perfsight.tune.tune``
(``--compile-modes`` limits the torch.compile modes tried per region) into a fresh temporary bank. The tuning
time is the wall time of that call: capture, every implementation, region and operator candidate (compiles
included), the in-step proof of the winners (reported apart too, with each
proposed winner's trial), bank and result files. Then ``perfsight.tune.verify.verify`` times whole training
steps with and without the bank (operator and step-settings winners and, on the model, subgraph winners),
interleaved, at torch's
default thread count (what users run; ``--threads N`` pins it, and the section says so). Reported: the untuned
and tuned step medians with p10-p90, the speed-up (untuned median over tuned median) with the interval of the
median paired ratio, the verdict (tune/rule.py: a win only when the interval's lower bound is above 1.0), the
winners and each stage's repo_summary, each winner's trial in the step, and every candidate each stage timed
alone with its fate (failed the check, not faster, not repaid, won alone). The same check against an
empty bank ("empty bank speed-up") measures what running under the bank costs by itself with no winner applied.

    PYTHONPATH=src python bench/tune_models.py                       # the table (~1 min)
    PYTHONPATH=src python bench/tune_models.py --markdown            # the bench/RESULTS.md section
    PYTHONPATH=src python bench/tune_models.py --append bench/RESULTS.md
    PYTHONPATH=src python bench/tune_models.py --modes op,subgraph,step,both --rounds 40 --warmup 3 --markdown
    PYTHONPATH=src python bench/tune_models.py --tiny --rounds 2     # smoke run

This is a benchmark, not a test: nothing here asserts on a time.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from collect_overhead import machine_facts  # bench/ scripts import their siblings
from stats import load_average

TITLE = "## Tuning two bundled models, winners proven in the training step (issues 6, 20, 33)"
MODES = ("op", "subgraph", "step", "both")


class SeparableBlock(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.depthwise = torch.nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.pointwise = torch.nn.Conv2d(channels, channels, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(self.bn2(self.pointwise(torch.relu(self.bn1(self.depthwise(x))))))


class SeparableCNN(torch.nn.Module):
    def __init__(self, width: int, blocks: int, classes: int = 10):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(width)
        self.blocks = torch.nn.Sequential(*(SeparableBlock(width) for _ in range(blocks)))
        self.head = torch.nn.Linear(width, classes)

    def forward(self, x):
        x = self.blocks(torch.relu(self.bn(self.stem(x))))
        return self.head(x.mean((2, 3)))


class EncoderBlock(torch.nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.up, self.down = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyTransformer(torch.nn.Module):
    def __init__(self, dim: int, heads: int, blocks: int, vocab: int = 256, classes: int = 10):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.Sequential(*(EncoderBlock(dim, heads) for _ in range(blocks)))
        self.head = torch.nn.Linear(dim, classes)

    def forward(self, tokens):
        return self.head(self.blocks(self.embed(tokens)).mean(1))


def models(tiny: bool) -> dict:
    """name -> (description, model, inputs, labels, optimizer factory), seeded."""
    torch.manual_seed(0)
    batch, image, width, blocks = (2, 16, 8, 1) if tiny else (16, 64, 32, 3)
    seq, dim, heads, layers = (8, 16, 2, 1) if tiny else (64, 64, 4, 2)
    labels = torch.randint(0, 10, (batch,))
    return {
        "cnn": (f"depthwise separable CNN, blocks: {blocks}, width {width}, batch {batch}x3x{image}x{image}; SGD "
                "(lr 0.01, momentum 0.9)", SeparableCNN(width, blocks), torch.randn(batch, 3, image, image), labels,
                lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9)),
        "transformer": (f"transformer encoder, blocks: {layers}, dim {dim}, {heads} heads, batch {batch}x{seq} tokens; "
                        "AdamW (lr 1e-3, weight decay 0.01)", TinyTransformer(dim, heads, layers),
                        torch.randint(0, 256, (batch, seq)), labels,
                        lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)),
    }


def training_step(model, inputs, labels, make_optimizer):
    optimizer = make_optimizer(model.parameters())

    def step():
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    return step


def run(args) -> list[dict]:
    import perfsight.tune
    from perfsight.tune.verify import verify

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfsight_tune_bench_") as scratch:
        for mode in args.modes:
            for name, (description, model, inputs, labels, make_optimizer) in models(args.tiny).items():
                step = training_step(model, inputs, labels, make_optimizer)
                tmp = Path(scratch) / f"{name}-{mode}"
                start = time.perf_counter()
                result = perfsight.tune.tune(model, step=step, mode=mode, bank=tmp / "bank", result_dir=tmp / "out",
                                             warmup=args.tune_warmup, repeats=args.tune_repeats,
                                             modes=args.compile_modes)
                tuning_s = time.perf_counter() - start
                verdict = verify(step, bank=tmp / "bank", model=model, rounds=args.rounds, warmup=args.warmup,
                                 threads=args.threads)
                empty = verify(step, bank=tmp / "empty", model=model, rounds=args.rounds, warmup=args.warmup,
                               threads=args.threads)
                stages = result.stages
                rows.append({"model": name, "mode": mode, "description": description, "tuning_s": tuning_s,
                             "proof_s": result.proof.seconds if result.proof is not None else 0.0,
                             "trials": _trials(result), "tried": _tried(result),
                             "summaries": {stage: r.repo_summary for stage, r in stages.items()},
                             "winners": {f"{where or '(the model)'} ({stage})": w
                                         for stage, r in stages.items() for where, w in r.winners.items()},
                             "verdict": verdict, "empty": empty, "step": step, "model_object": model, "bank": tmp})
                if not args.quiet:
                    print(f"{name}, {mode}: {verdict}\n{name}, {mode}, empty bank: {empty}", file=sys.stderr)
        if args.recheck_after is not None:
            time.sleep(args.recheck_after)
            for row in rows:        # the guard's check: the same bank, minutes later
                row["recheck"] = verify(row["step"], bank=row["bank"] / "bank", model=row["model_object"],
                                        rounds=args.rounds, warmup=args.warmup, threads=args.threads)
                if not args.quiet:
                    print(f"{row['model']}, {row['mode']}, re-checked: {row['recheck']}", file=sys.stderr)
    return rows


def _trials(result) -> list[dict]:
    """Each winner a stage proposed and its in-step trial: the result rows that carry one (``in_step``)."""
    return [{"stage": stage, "where": row["where"], "winner": row["best"], **row["in_step"]}
            for stage, r in result.stages.items() for row in r.rows if row.get("in_step")]


def _tried(result) -> list[dict]:
    """Every candidate each stage timed alone: where, its time against the default's, and what became of it."""
    tried = []
    for stage, r in result.stages.items():
        tuned = ((r.optat.settings if r.optat is not None else []) + (r.opat.operators if r.opat is not None else [])
                 + (r.sgat.subgraphs if r.sgat is not None else []))
        for where, m in ((signature.row()["where"], signature.measurement) for signature in tuned):
            for t in m.candidates if m is not None else []:
                tried.append({"stage": stage, "where": where, "candidate": t.name, "default_us": m.default.median_us,
                              "alone_us": t.median_us if t.samples_ns else None, "compile_s": t.compile_s,
                              "fate": _fate(t, m)})
    return tried


def _fate(candidate, measurement) -> str:
    if not candidate.ok:
        return "failed the check: " + candidate.reason.split("!")[0].split(";")[0][:90]
    if measurement.winner is candidate:
        return "won alone (tried in the step)"
    if candidate.repays is False:
        return "does not repay its compile"
    if measurement.winner is not None:
        return f"beaten by {measurement.winner.name}"
    return "not faster beyond the noise"


def tried_table(rows: list[dict]) -> str:
    """Every candidate tried alone, and its fate."""
    lines = ["| model | mode | stage: where | candidate | default -> alone us/call | compile s | fate |",
             "|---|---|---|---|---:|---:|---|"]
    for row in rows:
        for t in row["tried"]:
            alone = f"{t['alone_us']:,.0f}" if t["alone_us"] is not None else "-"
            compiled = f"{t['compile_s']:.1f}" if t["compile_s"] else "-"
            lines.append(f"| {row['model']} | {row['mode']} | {t['stage']}: {t['where']} | {t['candidate']} | "
                         f"{t['default_us']:,.0f} -> {alone} | {compiled} | {t['fate']} |")
    return "\n".join(lines)


def _ms(timing) -> tuple[str, str]:
    from perfsight.tune.verify import milliseconds

    median, low, high = milliseconds(timing)
    return f"{median:.2f}", f"{low:.2f}-{high:.2f}"


def table(rows: list[dict]) -> str:
    lines = ["| model | mode | tuning s | of which in-step proof s | tuned (per stage) | untuned ms/step | p10-p90 | "
             "tuned ms/step | p10-p90 | speed-up [the rule's interval] | verdict | re-checked [interval] | "
             "empty bank speed-up [interval] | winners in the bank |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for row in rows:
        v, empty = row["verdict"], row["empty"]
        low, high = v.judgement.low, v.judgement.high
        e_low, e_high = empty.judgement.low, empty.judgement.high
        winners = ", ".join(f"{op}: {w}" for op, w in sorted(row["winners"].items())) or "none"
        tuned = " + ".join(str(summary["total_num"]) for summary in row["summaries"].values())
        again = row.get("recheck")
        rechecked = (f"{again.speedup:.3f}x [{again.judgement.low:.3f}, {again.judgement.high:.3f}], {again.verdict}"
                     if again is not None else "-")
        lines.append(f"| {row['model']} | {row['mode']} | {row['tuning_s']:.1f} | {row['proof_s']:.1f} | {tuned} | "
                     f"{' | '.join(_ms(v.untuned))} | {' | '.join(_ms(v.tuned))} | {v.speedup:.3f}x "
                     f"[{low:.3f}, {high:.3f}] | {v.verdict}{'' if row['winners'] else ' (no winner: a control)'} | "
                     f"{rechecked} | {empty.speedup:.3f}x "
                     f"[{e_low:.3f}, {e_high:.3f}] | {winners} |")
    return "\n".join(lines)


def trials_table(rows: list[dict]) -> str:
    """Every winner a stage proposed, and what the training step said of it."""
    lines = ["| model | mode | stage: where | winner | default -> alone us/call | step without -> with ms | "
             "in the step [the rule's interval] | rounds | decision |",
             "|---|---|---|---|---:|---:|---:|---:|---|"]
    for row in rows:
        for t in row["trials"]:
            lines.append(f"| {row['model']} | {row['mode']} | {t['stage']}: {t['where']} | {t['winner']} | "
                         f"{t['default_us']:,.0f} -> {t['best_alone_us']:,.0f} | {t['step_without_us'] / 1e3:.2f} -> "
                         f"{t['step_with_us'] / 1e3:.2f} | {t['speedup']:.3f}x [{t['speedup_low'] or 0:.3f}, "
                         f"{t['speedup_high'] or float('inf'):.3f}] | {t['rounds']} | {t['decision']} |")
    return "\n".join(lines) if len(lines) > 2 else "No stage proposed a winner."


def markdown(rows: list[dict], args, load_before: str, wall_s: float) -> str:
    from perfsight.tune import rule

    threads = torch.get_num_threads()
    facts = machine_facts(threads)
    pinned = f"torch pinned to {threads} thread(s) (--threads)" if args.threads else \
        f"torch at its default thread count ({threads})"
    models_text = "\n".join(dict.fromkeys(f"- `{row['model']}`: {row['description']}" for row in rows))
    summaries = "; ".join(f"{row['model']} ({row['mode']}) {stage}: "
                          + ", ".join(f"{k}={v}" for k, v in summary.items())
                          for row in rows for stage, summary in row["summaries"].items())
    applied = "; ".join(f"{row['model']} ({row['mode']}): "
                        + (", ".join(f"{n} x{c}" for n, c in sorted(row["verdict"].applied.items())) or "none")
                        for row in rows)
    command = "PYTHONPATH=src python bench/tune_models.py " + " ".join(args.argv_shown)
    stage_order = " (both: the step settings, then subgraph, then op)" if "both" in args.modes else ""
    return "\n".join([
        TITLE,
        "",
        f"Tuning (`perfsight.tune.tune`, modes {', '.join(args.modes)}{stage_order}; torch.compile modes tried "
        f"per region: {', '.join(args.compile_modes)}) of one training step (zero_grad, forward, cross-entropy, "
        f"backward, optimizer step) of two bundled models, each into a fresh temporary bank, then the end-to-end "
        f"check (`perfsight.tune.verify.verify` with the model): whole training steps with and without the bank's "
        f"operator, subgraph and step-settings winners, {args.rounds} interleaved rounds (the first side "
        f"alternating) after {args.warmup} warm-up round(s), {pinned}. Produced by `bench/tune_models.py`; a "
        f"benchmark, not a test.",
        "",
        models_text,
        "",
        f"*tuning s* is the wall time of `perfsight.tune.tune` (capture of 2 steps, every candidate of every region "
        f"and operator signature timed {args.tune_repeats} times after {args.tune_warmup} warm-up run(s) - up to 3x "
        f"as many when undecided - compiles included, the in-step proof of the winners, bank, result files); *of "
        f"which in-step proof s* the time the proof added; *tuned (per stage)* the total_num of each stage, in the "
        f"order they ran. "
        f"The speed-up is the untuned median over the tuned median, with the interval of the median paired "
        f"speed-up; the bank \"wins end to end\" by the tuner's own rule (tune/rule.py): {rule.RULE}. *empty bank "
        f"speed-up* is the same check against "
        f"an empty bank, run right after: what running under a bank costs by itself when no winner applies (it "
        f"patches only the functions the bank has winners for), and the same step against itself: the control. "
        + (f"*re-checked* is the bank verified again {args.recheck_after:.0f} s after the last model was tuned, "
           "as the guard checks it in a run." if args.recheck_after is not None else "Not re-checked."),
        "",
        table(rows),
        "",
        "The winners each stage proposed and their trials in the training step (tune/prove.py: the step "
        "with the winners kept before it, against the same plus the proposal, interleaved, judged by the rule "
        "of tune/rule.py at its looks):",
        "",
        trials_table(rows),
        "",
        "Every candidate each stage timed alone (the optimizer's implementations, the whole model, then its regions, "
        "then operators), and its fate:",
        "",
        tried_table(rows),
        "",
        f"repo_summary: {summaries}. Winner calls applied during the timed and warm-up tuned steps: {applied}.",
        "",
        f"Machine: {facts['cpu']}, {facts['cores']} cores ({facts['usable_cores']} usable), torch {facts['torch']}, "
        f"{threads} torch thread(s), Python {facts['python']}, {facts['platform']}. Load average (1, 5, 15 min) "
        f"before / after: {load_before} / {load_average()}. Benchmark wall time: {wall_s:.0f} s.",
        "",
        "Reproduce (from the repository root):",
        "",
        f"    {command}",
        "",
    ])


def _modes(text: str) -> list[str]:
    modes = text.split(",")
    wrong = [m for m in modes if m not in MODES]
    if wrong:
        raise argparse.ArgumentTypeError(f"{', '.join(wrong)}: allowed are {', '.join(MODES)}")
    return modes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100, help="timed interleaved rounds of verify (default 100)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds before them (default 5)")
    parser.add_argument("--tune-repeats", type=int, default=15, help="timed repeats per candidate (default 15)")
    parser.add_argument("--tune-warmup", type=int, default=3, help="warm-up runs per candidate (default 3)")
    parser.add_argument("--modes", type=_modes, default=["both"],
                        help="what to tune, comma-separated of op, subgraph, step, both (default both: the step "
                             "settings, then subgraphs, then operators)")
    parser.add_argument("--compile-modes", type=lambda text: text.split(","), default=["default", "lite"],
                        help="torch.compile modes tried per region, comma-separated (default default,lite)")
    parser.add_argument("--threads", type=int, help="pin torch to this many threads (default: torch's own count, "
                                                    "what users run)")
    parser.add_argument("--recheck-after", type=float, default=120.0, metavar="S",
                        help="verify every bank again S seconds after the last model (the guard's check; default "
                             "120); a negative value skips it")
    parser.add_argument("--tiny", action="store_true", help="tiny models (smoke runs)")
    parser.add_argument("--markdown", action="store_true", help="print the bench/RESULTS.md section")
    parser.add_argument("--append", type=Path, help="append the markdown section to this file")
    parser.add_argument("--quiet", action="store_true", help="no per-model lines on stderr")
    args = parser.parse_args(argv)
    args.argv_shown = [a for a in (sys.argv[1:] if argv is None else argv) if a not in ("--quiet",)]
    if args.recheck_after < 0:
        args.recheck_after = None
    load_before = load_average()
    start = time.perf_counter()
    rows = run(args)
    wall_s = time.perf_counter() - start
    if args.markdown or args.append:
        section = markdown(rows, args, load_before, wall_s)
        if args.append:
            with args.append.open("a", encoding="utf-8") as out:
                out.write("\n" + section)
        if args.markdown:
            print(section)
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
