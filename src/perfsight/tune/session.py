"""One tuning task: settings, the seed's preconditions, bank, result file, OPAT and SGAT, what came out.

``tune(model, batch)`` (exported as ``perfsight.tune.tune`` and ``perfsight.tune_model``) captures two
steps of ``model`` on ``batch`` (or of ``step()``), checks the preconditions, then runs its stages in
order: ``op`` tunes every tunable operator signature (tune/opat.py), ``subgraph`` every region
(tune/sgat.py), ``step`` the settings of the whole step - the implementation of each optimizer the steps ran
(tune/optat.py), the workers of the data loaders they waited on (tune/loadat.py), TunableOp on a GPU
(tune/tunableop.py) - into the bank and ``aoe_result_opat_*.json`` (one task per stage). ``mode="both"`` runs
them all: the step settings first, then the regions and the operators, by default in the seed's advised
order ``order="subgraph,op"``: the operators inside regions that
got a compiled winner are then not operator-tuned (compiled code does not run them), nor those inside a
region run at another thread count (they would be timed at the caller's). With
``order="op,subgraph"`` the regions are tuned against plain eager. ``tune_recorded`` runs the stages
on steps recorded elsewhere: ``perfsight tune -- python train.py`` records a script's own steps and
replays its model's forward for the regions (tune/autostart.py).

The stages tune into a ``bank.StagedBank``: nothing is written until their winners are proven in the
training step (tune/prove.py, tune/proof.py) with ``proof_step`` (``tune``'s: the step it was given, or the
model's training step on the batch): a winner is kept only if whole steps run faster with it beside those
kept before it, and the kept set must beat the default end to end. Then the bank gets the kept winners, and
each rejected one as an entry without a strategy recording its candidate and the figures that rejected it
(``Entry.rejected``; unsatisfied in repo_summary when the bank had no strategy for it). The stages' rows,
winners, summaries and result files are brought in line (each row's ``in_step``), and the end-to-end
figure is the result's ``proof``. Without a ``proof_step`` the winners are written as their stages found
them (the result says so: ``proof`` None).

The preconditions, after the seed's "before tuning" list; a failed one raises ``TunePreconditionError``
naming what was found and what is needed, before anything is tuned:

- profiling off: no perfsight Profiler and no torch.profiler active (they would distort the timings);
- static shapes: no forward op changes shapes between the captured steps;
- free disk: ``MIN_FREE_DISK`` where the bank and the result file go. The seed asks 20 GB for AOE's
  compiled kernels; perfsight's bank is JSON of a few KB per signature, so 1 GiB is ample;
- free memory: ``MIN_FREE_MEMORY`` plus, per parallel tuning (TUNING_PARALLEL_NUM), four times the
  tensors of the largest signature (its inputs, output, gradients and a candidate's copies). The seed's
  figure is the model's memory times TUNING_PARALLEL_NUM, since AOE tunes in separate processes;
  perfsight tunes one signature at a time in the training process.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from perfsight.core.errors import OptionError, TunePreconditionError
from perfsight.tune.env import OPERATOR, SUBGRAPH, TuneSettings

MODES = {"op": OPERATOR, "subgraph": SUBGRAPH, "step": None, "both": None}
ORDERS = ("subgraph,op", "op,subgraph")
#: the subgraph stage's own options (expected_steps goes to both stages)
_SGAT_OPTIONS = ("modes", "schedule", "whole", "compiler", "min_share", "max_share")
_PROOF_OPTIONS = ("proof_rounds", "proof_warmup", "proof_margin")
MIN_FREE_DISK = 1 << 30
MIN_FREE_MEMORY = 512 << 20
_ITEM_BYTES = {"float64": 8, "int64": 8, "complex64": 8, "float16": 2, "bfloat16": 2, "int16": 2,
               "bool": 1, "int8": 1, "uint8": 1}


@dataclass(frozen=True)
class Precondition:
    name: str
    ok: bool
    found: str
    needed: str

    def __str__(self) -> str:
        return f"{self.name}: {'ok' if self.ok else 'FAILED'} (found {self.found}; needed {self.needed})"


@dataclass
class TuneResult:
    """``report``: the result file; ``bank``: the bank directory; ``winners``: op_name (or region paths, or step
    setting) -> winning candidate of what was tuned now; ``failed``: the same -> why its tuning failed (counted
    in repo_summary as unsatisfied, or reserved); ``opat`` / ``sgat`` / ``optat``: every operator's / region's /
    step setting's outcome and measurement; ``repo_summary``: the op
    stage's when it ran, else the subgraph stage's, else the step stage's; ``stages``: each stage's own
    result, in the order they ran; ``status``: the result file's (the seed's word); ``rows`` and ``verdict``:
    every signature's outcome and why, and what came out."""

    report: Path
    bank: Path
    repo_summary: dict
    winners: dict[str, str]
    preconditions: list[Precondition] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    opat: object = None
    sgat: object = None
    optat: object = None
    stages: dict[str, TuneResult] = field(default_factory=dict)
    status: str = ""  # the result file's: tuning successful, failed or incomplete
    task: object = None   # the stage's result-file task (report.OpatReport or SgatReport)
    proof: object = None  # the in-step proof (prove.Ablation) the winners passed; None when none ran
    #: how long the recorded steps waited for batches (capture.InputWait.as_dict), and whether their loaders
    #: were tuned ("tuned": the step stage ran on a script's steps)
    input_wait: dict | None = None

    @property
    def rows(self) -> list[dict]:
        """Every signature tuned (``measure.outcome``): where, what, default and best times, winner, why."""
        return ([o.row() for o in self.optat.settings] if self.optat is not None else []) + (
            [o.row() for o in self.opat.operators] if self.opat is not None else []) + (
            [s.row() for s in self.sgat.subgraphs] if self.sgat is not None else [])

    @property
    def verdict(self) -> str:
        """What came out, in one sentence: how many signatures hold a winner - or plainly that none does
        (the result file then still says "tuning successful", the seed's word for a task that completed)."""
        rows = self.rows
        held = sum(1 for row in rows if row["winner"])
        failed = f"; {len(self.failed)} failed to tune" if self.failed else ""
        if not rows:
            return "tuning finished: no tunable signature was found in the recorded steps"
        if held:
            return (f"{self.status}: {held} of {len(rows)} signatures hold a winner in the bank "
                    f"({len(self.winners)} found now){failed}")
        if failed:
            return f"tuning finished without a winner: no candidate beat the default{failed} (of {len(rows)})"
        return (f"tuning finished: no candidate beat the default for any of {len(rows)} signatures; the bank "
                "holds no winners for this model")


@dataclass(frozen=True)
class Plan:
    """The settings of one task: the environment's (TuneSettings) with the caller's arguments on top."""

    settings: TuneSettings
    repeat: bool
    result_dir: Path
    stages: tuple[str, ...] = ("op",)

    @property
    def bank_path(self) -> Path:
        return self.settings.bank_path

    @property
    def order(self) -> str | None:
        """The order of the op and subgraph stages when both run (the step stage always goes first)."""
        tuned = [stage for stage in self.stages if stage in ("op", "subgraph")]
        return ",".join(tuned) if len(tuned) > 1 else None


def plan(mode: str | None = None, bank: str | Path | None = None, repeat: bool | None = None,
         result_dir: str | Path | None = None, environ=None, order: str | None = None) -> Plan:
    """Validate the mode (op, subgraph or both) and the order of both, and merge the arguments over the
    environment's settings."""
    settings = TuneSettings.from_env() if environ is None else TuneSettings.from_env(environ)
    if mode is None:
        mode = "subgraph" if settings.mode == SUBGRAPH else "op"
    if mode not in MODES:
        raise OptionError(f"tuning mode {mode!r} is not allowed; allowed: op (operator tuning, OPAT), "
                          "subgraph (subgraph tuning, SGAT), step (the step settings: optimizers, data loaders, "
                          "TunableOp), both")
    if order is not None and order not in ORDERS:
        raise OptionError(f"tuning order {order!r} is not allowed; allowed: {', '.join(ORDERS)}")
    stages = ("step", *(order or ORDERS[0]).split(",")) if mode == "both" else (mode,)
    if bank is not None:
        bank = Path(bank).expanduser().absolute()
        if bank.exists() and not bank.is_dir():
            raise OptionError(f"the tuning bank {bank} is a file: expected a directory (created if missing)")
        settings = replace(settings, bank_path=bank)
    result = Path(result_dir).expanduser().absolute() if result_dir is not None else settings.work_path
    return Plan(settings, settings.repeat_tune if repeat is None else bool(repeat), result, stages)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def check_profiling_off() -> Precondition:
    import torch

    from perfsight.collect.profiler import active_profiler

    found = [name for name, on in (("a perfsight Profiler", active_profiler() is not None),
                                   ("torch.profiler", torch._C._autograd._profiler_enabled())) if on]
    return Precondition("profiling off", not found, " and ".join(found) + " active" if found else "none active",
                        "no profiler while tuning (stop it, or unset PERFSIGHT_OPTIONS / PROFILING_OPTIONS)")


def check_static(captured) -> Precondition:
    if captured.steps < 2:
        return Precondition("static shapes", False, f"{captured.steps} step captured", "2 steps to compare")
    if captured.static:
        return Precondition("static shapes", True, f"the same shapes in {captured.steps} steps", "static shapes")
    first = captured.dynamic[0]
    where = f"{first['module'] or 'top level'}/{first['op']} shapes {first['shapes']}"
    return Precondition("static shapes", False, f"{len(captured.dynamic)} ops change shape (first: {where})",
                        "static shapes (dynamic operators are not supported): fix the input size")


def check_disk(*paths: Path) -> list[Precondition]:
    checks = []
    for path in dict.fromkeys(_existing(p) for p in paths):
        free = shutil.disk_usage(path).free
        checks.append(Precondition(f"free disk at {path}", free >= MIN_FREE_DISK, _gib(free), _gib(MIN_FREE_DISK)))
    return checks


def signature_bytes(sig: dict) -> int:
    total = 0
    for spec in sig["tensors"].values():
        count = 1
        for size in spec["shape"]:
            count *= size
        total += count * _ITEM_BYTES.get(spec["dtype"], 4)
    return total


def check_memory(captured, parallel: int, stages: tuple[str, ...] = ("op",)) -> Precondition:
    """Free memory for the operator stage's copies and, with the step stage, the optimizer copies it makes
    (``optat.copies_bytes``)."""
    import psutil

    from perfsight.tune.optat import copies_bytes

    largest = max((signature_bytes(r.signature) for r in captured.tunable), default=0)
    optimizers = copies_bytes(captured.optimizers) if "step" in stages else 0
    needed = MIN_FREE_MEMORY + 4 * largest * parallel + optimizers
    free = psutil.virtual_memory().available
    copies = f" + {optimizers} bytes of optimizer copies" if optimizers else ""
    return Precondition("free memory", free >= needed, _gib(free), f"{_gib(needed)} ({_gib(MIN_FREE_MEMORY)} + 4 x "
                        f"{largest} bytes x {parallel} parallel{copies})")


def preconditions(captured, the_plan: Plan) -> list[Precondition]:
    """Every precondition, checked; raises TunePreconditionError naming the failed ones."""
    checks = [check_profiling_off(), check_static(captured),
              *check_disk(the_plan.bank_path, the_plan.result_dir),
              check_memory(captured, the_plan.settings.tuning_parallel_num, the_plan.stages)]
    failed = [c for c in checks if not c.ok]
    if failed:
        raise TunePreconditionError("cannot tune: " + "; ".join(map(str, failed)))
    return checks


def _opened_bank(the_plan: Plan):
    from perfsight.tune.bank import Bank

    bank = Bank.open(the_plan.settings)
    bank.check_fresh()
    return bank


def compile_workers(settings: TuneSettings):
    """While tuning: torch.compile's parallel compile workers (inductor's ``compile_threads``) as
    TE_PARALLEL_COMPILER asks, at most one per CPU (the seed's compile processes; more than the CPUs
    only slows the timings down)."""
    import torch._inductor.config as inductor_config

    return inductor_config.patch(compile_threads=max(1, min(settings.te_parallel_compiler, os.cpu_count() or 1)))


def tune_capture(captured, the_plan: Plan, bank, *, tuning_name: str, skip: tuple[str, ...] = (),
                 **measuring) -> TuneResult:
    """The op stage: tune the operators of ``captured`` - except those inside the module paths ``skip`` -
    into ``bank`` and write the result file."""
    from perfsight.tune import opat
    from perfsight.tune.report import INCOMPLETE, OpatReport

    if skip:
        captured = replace(captured, tunable=[r for r in captured.tunable if not _inside(r.module, skip)])
    report = OpatReport(the_plan.result_dir, tuning_name)

    def operators():
        with compile_workers(the_plan.settings):
            return opat.tune_captured(captured, bank=bank, report=report, repeat=the_plan.repeat, **measuring)
    return _stage(report, bank, operators, "opat", INCOMPLETE)


def _stage(report, bank, run: Callable[[], object], kind: str, failed: str) -> TuneResult:
    """One stage: ``run()`` tunes into ``bank`` and its result-file task ``report`` (finished as ``failed`` when it
    raises); its outcome is the TuneResult's ``kind`` (opat, sgat or optat), whose signatures name the winners
    and failures by ``where``."""
    try:
        outcome = run()
    except BaseException:
        report.finish(failed)
        raise
    report.finish()
    tuned = {"opat": "operators", "sgat": "subgraphs", "optat": "settings"}[kind]
    done = getattr(outcome, tuned)
    winners = {o.where: o.measurement.winner.name for o in done
               if o.measurement is not None and o.measurement.winner is not None}
    return TuneResult(report.path, bank.directory, outcome.summary.as_dict(), winners,
                      failed={o.where: o.error for o in done if o.error}, status=report.status, task=report,
                      **{kind: outcome})


def _inside(module: str, paths: tuple[str, ...]) -> bool:
    return any(not p or module == p or module.startswith(p + ".") for p in paths)  # '': the root


def tune_step_settings(captured, the_plan: Plan, bank, *, tuning_name: str, loader_step: Callable[[], object] | None,
                       proof_step: Callable[[], object] | None, model=None, **measuring) -> TuneResult:
    """The step stage: tune the implementation of the optimizers ``captured`` saw step; with ``loader_step()``
    (a training step that draws no batch) when the steps waited on their batches, the settings of their data
    loaders; on a GPU, with ``proof_step()`` and ``model``, TunableOp; into ``bank``. Write the result file
    (``report.StepReport``)."""
    from perfsight.tune import tunableop
    from perfsight.tune.loadat import tune_loaders
    from perfsight.tune.optat import tune_optimizers
    from perfsight.tune.report import INCOMPLETE, StepReport

    report = StepReport(the_plan.result_dir, tuning_name)
    timing = {k: v for k, v in measuring.items() if k in ("timer", "expected_steps", "margin")}

    def settings():
        done = tune_optimizers(captured.optimizers, bank=bank, report=report, repeat=the_plan.repeat, **measuring)
        if loader_step is not None:
            done.loaders = tune_loaders(captured.input_wait, loader_step, bank=bank, report=report,
                                        repeat=the_plan.repeat, **timing)
        if proof_step is not None and model is not None:
            done.gemms = tunableop.tune_setting(proof_step, model, bank=bank, report=report, repeat=the_plan.repeat,
                                                **measuring)
        for setting in done.loaders + done.gemms:
            done.summary.record(setting.update_mode)
        return done
    return _stage(report, bank, settings, "optat", INCOMPLETE)


def tune_regions(model, step, the_plan: Plan, bank, *, tuning_name: str, **options) -> TuneResult:
    """The subgraph stage: tune the regions of ``model`` run by ``step`` into ``bank``; write the result file."""
    from perfsight.tune.report import FAILED, SgatReport
    from perfsight.tune.sgat import tune_subgraphs

    report = SgatReport(the_plan.result_dir, tuning_name)

    def regions():
        with compile_workers(the_plan.settings):
            return tune_subgraphs(model, step, bank=bank, report=report, repeat=the_plan.repeat, **options)
    return _stage(report, bank, regions, "sgat", FAILED)


def tune(model=None, batch=None, *, step: Callable[[], object] | None = None, mode: str | None = None,
         order: str | None = None, bank: str | Path | None = None, repeat: bool | None = None, steps: int = 2,
         result_dir: str | Path | None = None, **measuring) -> TuneResult:
    """Tune the operators (mode "op"), the regions ("subgraph") or both ("both", in ``order``) of ``model``
    on ``batch`` (a tensor or a tuple of model inputs; the op stage's loss is the output's mean; the
    subgraph stage runs a training step in training mode, a forward without grad in eval mode), or of
    ``step()`` (``model`` then only names the operators; the subgraph stage needs it). ``measuring``: the
    timing keywords (timer, warmup, repeats, margin), ``expected_steps`` (what a compile must be repaid
    over, both stages), the subgraph stage's (modes, schedule, whole, compiler, min_share, max_share; see
    ``sgat.tune_subgraphs``) and the in-step proof's (``proof_rounds``, ``proof_warmup``, ``proof_margin``;
    ``prove.Ablation``). Arguments left None come from the environment (AOE_MODE, TUNE_BANK_PATH,
    REPEAT_TUNE, ASCEND_WORK_PATH; see tune/env.py)."""
    from perfsight.tune.capture import capture, train_step
    from perfsight.tune.sgat import as_step

    the_plan = plan(mode, bank, repeat, result_dir, order=order)
    if steps < 2:
        raise OptionError(f"steps={steps} is too few: at least 2 steps are needed to check for static shapes")
    if step is None and (model is None or batch is None):
        raise OptionError("tune needs a model and an example batch, or step=a function running one step")
    if "subgraph" in the_plan.stages and model is None:
        raise OptionError("subgraph tuning needs the model (its modules are the regions) besides step=")
    op_step = step or train_step(model, batch)
    name = type(model).__name__ if model is not None else getattr(op_step, "__name__", "step")
    captured = capture(op_step, model=model, steps=steps)
    region_step = (step or as_step(model, batch)) if "subgraph" in the_plan.stages else None
    return tune_recorded(captured, the_plan, model=model, step=region_step, tuning_name=name,
                         proof_step=step or as_step(model, batch), **measuring)


def tune_recorded(captured, the_plan: Plan, *, tuning_name: str, model=None, step: Callable[[], object] | None = None,
                  proof_step: Callable[[], object] | None = None, loader_step: Callable[[], object] | None = None,
                  **measuring) -> TuneResult:
    """Check the preconditions on the recorded steps ``captured``, then run the plan's stages into its bank
    (one result-file task each): the step stage tunes ``captured``'s optimizers and, with ``loader_step()``
    (a training step that draws no batch: a script's replayed one), its data loaders; the op stage tunes its
    operators, the subgraph stage the regions of ``model`` run by ``step()``; their winners are proven in
    ``proof_step()`` before any is written (module docstring). ``measuring``: as for ``tune``."""
    from perfsight.tune.bank import StagedBank

    checks = preconditions(captured, the_plan)
    the_bank = StagedBank(_opened_bank(the_plan))
    proof_options = {k.removeprefix("proof_"): measuring.pop(k) for k in _PROOF_OPTIONS if k in measuring}
    sgat_options = {k: measuring.pop(k) for k in _SGAT_OPTIONS if k in measuring}
    results: dict[str, TuneResult] = {}
    for stage in the_plan.stages:
        if stage == "step":
            results[stage] = tune_step_settings(captured, the_plan, the_bank, tuning_name=tuning_name,
                                                loader_step=loader_step, proof_step=proof_step, model=model,
                                                **measuring)
        elif stage == "op":
            not_op_tuned = tuple(path for s in (results["subgraph"].sgat.subgraphs if "subgraph" in results else ())
                                 if _runs_its_operators_its_way(the_bank, s.key) for path in s.names)
            results[stage] = tune_capture(captured, the_plan, the_bank, tuning_name=tuning_name, skip=not_op_tuned,
                                          **measuring)
        else:
            results[stage] = tune_regions(model, step, the_plan, the_bank, tuning_name=tuning_name, **measuring,
                                          **sgat_options)
    proof = None
    if proof_step is not None:
        from perfsight.tune.proof import proven

        with compile_workers(the_plan.settings):
            proof = proven(the_bank, results, proof_step, model, repeat=the_plan.repeat,
                           timer=measuring.get("timer"), compiler=sgat_options.get("compiler"), **proof_options)
    else:
        the_bank.commit({}, repeat=the_plan.repeat)
    result = replace(results.get("op") or results.get("subgraph") or results["step"], preconditions=checks,
                     stages=results, proof=proof, input_wait={**captured.input_wait.as_dict(),
                                                              "tuned": "step" in results and loader_step is not None})
    for stage, outcome in (("subgraph", "sgat"), ("step", "optat")):
        if stage in results:
            setattr(result, outcome, getattr(results[stage], outcome))
            result.winners = {**results[stage].winners, **result.winners}
    return result


def _runs_its_operators_its_way(bank, key: str) -> bool:
    """Whether the bank's subgraph winner for ``key`` is compiled or sets the thread count, so that its
    operators are not operator-tuned."""
    entry = bank.get("subgraph", key) if key else None
    params = entry.winner_params() if entry else {}
    return bool(params.get("compile") or params.get("threads"))
