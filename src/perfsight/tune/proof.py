"""The stages' winners tried in the training step, then written: what ``session.tune_recorded`` runs between its
stages and the bank.

``proven(staged, results, step, model)`` makes a ``prove.Proposal`` of every winner the stages found now (an
added or updated strategy; ``staged``: the ``bank.StagedBank`` they tuned into), runs ``prove.prove`` over
``step()``. Each step runs under the winners of its configuration: the operator winners (``apply.TunedMode``
over ``staged.view(keys)``), on ``model`` its subgraph winners (one ``apply.AppliedSubgraphs`` whose ``only``
follows the configuration), and the step-settings winners likewise (``apply.AppliedOptimizers`` on the
optimizers ``step()`` runs, ``apply.AppliedTunableOp`` on a GPU). A data loader's winner is proven in its own
stage's steps (tune/loadat.py) and not tried again here. Then it commits the bank: the kept winners, and the
rejected ones without their strategy, each with its in-step figures (``Entry.rejected``). It brings the
stages' outcomes in line: each signature's update mode and ``in_step`` figures, the winners, repo_summary, and
the result-file tasks (``report.proven``, ``proven_end_to_end``). A winner the bank records as rejected in the
step before (the same candidate, found again under REPEAT_TUNE) is not tried again: it stays rejected with its
earlier figures (``NOT_RETRIED``). The model's buffers (BatchNorm statistics) and gradients are restored after
the proof and its random-number state too; weights an optimizer in the step moved stay moved.
"""
from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable

import torch

from perfsight.tune.apply import TunedMode, apply_optimizers, apply_subgraphs, apply_tunableop
from perfsight.tune.bank import StagedBank
from perfsight.tune.measure import KEPT, REJECTED
from perfsight.tune.prove import PROOF_ROUNDS, PROOF_WARMUP, Ablation, Proposal, prove
from perfsight.tune.sgat import preserved

#: the update modes of a strategy found now, which must be proven in the step before it is written
NEW_STRATEGY = ("add", "update")
#: the decision on a winner the step rejected before (``Entry.rejected`` with the same candidate): not tried again
NOT_RETRIED = "rejected before"


def _outcomes(result) -> list[tuple[str, object]]:
    """(kind, outcome) of every signature one stage's result holds."""
    return [("op", o) for o in (result.opat.operators if result.opat is not None else [])] + [
        ("subgraph", s) for s in (result.sgat.subgraphs if result.sgat is not None else [])] + [
        ("step", o) for o in (result.optat.settings if result.optat is not None else [])]


def _name(kind: str, outcome) -> str:
    return ",".join(n or "(the model)" for n in outcome.names) if kind == "subgraph" else outcome.where


def proposals(staged: StagedBank, results: dict) -> list[Proposal]:
    """The winners the stages found now, as proposals (their calls per step from their bank entry's timing
    conditions)."""
    found = []
    for kind, outcome in (found for result in results.values() for found in _outcomes(result)):
        m = outcome.measurement
        if m is None or m.winner is None or outcome.update_mode not in NEW_STRATEGY or outcome.in_step is not None:
            continue   # no new winner, or one its stage proved in steps already (a data loader's)
        entry = staged.pending[kind][outcome.key]
        conditions = entry.candidates[0].get("params") or {} if entry.candidates else {}
        found.append(Proposal(kind, outcome.key, _name(kind, outcome), m.winner.name, m.default.median_us,
                              m.winner.median_us, float(conditions.get("calls_per_step") or 1.0)))
    return found


def proven(staged: StagedBank, results: dict, step: Callable[[], object], model: torch.nn.Module | None, *,
           repeat: bool, rounds: int = PROOF_ROUNDS, warmup: int = PROOF_WARMUP, margin: float = 0.0,
           timer: Callable[[], int] | None = None, compiler: Callable | None = None) -> Ablation:
    """Prove the stages' new winners in ``step()``, commit the bank and update ``results`` (module docstring);
    ``timer`` and ``compiler`` as the stages were given them (tests' fakes), else the real ones."""
    proposed, again = [], {}
    for proposal in proposals(staged, results):
        before = staged.base.get(proposal.kind, proposal.key)
        if before is not None and before.rejected and before.rejected.get("winner") == proposal.winner:
            again[proposal.key] = before.rejected.get("in_step") or {}   # lost in the step before: not retried
        else:
            proposed.append(proposal)
    subgraph_keys = frozenset(p.key for p in proposed if p.kind == "subgraph")
    step_keys = frozenset(p.key for p in proposed if p.kind == "step")
    regions = (apply_subgraphs(model, staged.view(subgraph_keys), compiler=compiler)
               if model is not None and subgraph_keys else None)
    settings = apply_optimizers(staged.view(step_keys)) if step_keys else None
    gemms = apply_tunableop(staged.view(step_keys)) if step_keys else None
    kept_before = {kind: frozenset(k for k, e in staged.base.entries(kind).items() if e.winner is not None)
                   for kind in ("subgraph", "step")}

    @contextmanager
    def under(keys: frozenset[str]):
        if regions is not None:
            regions.only = kept_before["subgraph"] | (keys & subgraph_keys)
        for applied in (settings, gemms):
            if applied is not None:
                applied.only = kept_before["step"] | (keys & step_keys)
        with TunedMode(staged.view(keys)):
            yield

    try:
        with torch.random.fork_rng(), preserved(model) if model is not None else nullcontext():
            ablation = prove(step, proposed, under, rounds=rounds, warmup=warmup, margin=margin,
                             timer=timer or time.perf_counter_ns)
    finally:
        for applied in (regions, settings, gemms):
            if applied is not None:
                applied.remove()
    rejected = {key: decision.as_dict() for key, decision in ablation.rejected().items()}
    rejected.update({key: {**figures, "decision": NOT_RETRIED} for key, figures in again.items()})
    rejected.update({outcome.key: outcome.in_step for result in results.values() for _, outcome in _outcomes(result)
                     if outcome.in_step is not None and outcome.in_step["decision"] == REJECTED})
    modes = staged.commit({key: {"in_step": figures} for key, figures in rejected.items()}, repeat=repeat)
    _update(results, ablation, rejected, modes, staged.directory)
    return ablation


def _update(results: dict, ablation: Ablation, rejected: dict[str, dict], modes: dict[str, str], bank: Path) -> None:
    """Each stage's outcomes, winners, repo_summary and result-file task after the proof."""
    trial = {d.proposal.key: d.as_dict() for d in ablation.decisions if d.proposal is not None}
    verdict = ablation.verdict(threads=torch.get_num_threads(), bank=bank)
    for result in results.values():
        summary = (result.opat or result.sgat or result.optat).summary
        for kind, outcome in _outcomes(result):
            decision = rejected.get(outcome.key) or trial.get(outcome.key)
            if decision is None:
                continue
            figures = {**decision, "decision": decision["decision"] if outcome.key in rejected else KEPT,
                       "default_us": round(outcome.measurement.default.median_us, 3),
                       "best_alone_us": round(outcome.measurement.winner.median_us, 3)}
            before, after = outcome.update_mode, modes.get(outcome.key, outcome.update_mode)
            if before != after:
                summary.move(before, after)
                outcome.update_mode = after
                result.winners.pop(outcome.where, None)
            outcome.in_step = figures
            if result.task is not None:
                result.task.proven(outcome.key if kind == "subgraph" else outcome.where, before, after, figures)
        result.repo_summary = summary.as_dict()
        if result.task is not None:
            result.task.proven_end_to_end(None if verdict is None else verdict.as_dict())
