"""The AOE result files, field for field as the seed documents them.

One file per process and result directory, ``aoe_result_opat_{YYYYMMDDhhmmssmmm}_{pid}.json`` (the seed
gives subgraph tuning the same name), created when the first tuning task starts and rewritten whole as
results arrive. Each task is one top-level ``report_{YYYYMMDDhhmmssmmm}_{tid}`` list::

    [{"basic": {"tuning_name": ..., "tuning_time(s)": ...}},     # tuning_time(s) only once finished
     {"OPAT": {...}} or {"SGAT": {...}}]                          # absent while there is nothing to say

A crash leaves the last complete file: ``tuning_time(s)`` absent and, for OPAT, "tuning incomplete". perfsight
adds ``{"perfsight_in_step": {"signatures": [...], "end_to_end": ...}}`` to a task whose winners were tried in
the training step (tune/prove.py): per signature its default, best-alone and in-step times and the decision;
a rejected winner leaves the modified lists and counts in repo_summary as what the bank then holds. The
step-settings stage, which the seed does not have, writes a task with ``{"perfsight_step_settings": {...}}``
in OPAT's place, laid out as OPAT's part.
Keys are written sorted, which is the order of the seed's examples. ``performance_improvement`` is
(before - after) / after of the unrounded times, truncated to two decimals (times are shown rounded to 3
decimals in us, 6 in ms): that reproduces the seed's figures (118.71%, 56.28%, 78.15%, 55.11%, and 6.37%
for times shown as 16.71 and 15.71 us).
"""
from __future__ import annotations

import os
import threading
import time
from decimal import ROUND_DOWN, Decimal
from pathlib import Path

from perfsight.core.jsonfile import write_json_atomic
from perfsight.tune.bank import RepoSummary

FILE_PREFIX = "aoe_result_opat"
SUCCESSFUL = "tuning successful"
FAILED = "tuning failed"
INCOMPLETE = "tuning incomplete"
STATUSES = (SUCCESSFUL, FAILED, INCOMPLETE)
MODIFIED = ("add", "update")
#: perfsight's addition to a task: its winners' in-step trials and the end-to-end one (tune/prove.py)
IN_STEP = "perfsight_in_step"
#: perfsight's task of the step-settings stage (optimizers, data loaders, TunableOp), beside OPAT's and SGAT's
STEP_SETTINGS = "perfsight_step_settings"

_files: dict[tuple[Path, int], _ResultFile] = {}  # (result directory, pid): a forked child gets its own
_files_lock = threading.Lock()


def improvement(before: float, after: float) -> str:
    """The seed's performance_improvement: (before - after) / after as a percentage, two decimals."""
    if after <= 0:
        raise ValueError(f"a tuned time must be positive to compute an improvement, got {after}")
    ratio = (Decimal(repr(before)) - Decimal(repr(after))) / Decimal(repr(after)) * 100
    return f"{ratio.quantize(Decimal('0.01'), rounding=ROUND_DOWN)}%"


def stamp(now_ns: int | None = None) -> str:
    """``YYYYMMDDhhmmssmmm`` in local time."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    seconds, rest = divmod(now_ns, 1_000_000_000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(seconds)) + f"{rest // 1_000_000:03d}"


class _ResultFile:
    """This process's result file in one directory: its tasks, rewritten whole on every change."""

    def __init__(self, result_dir: Path):
        result_dir.mkdir(parents=True, exist_ok=True)
        self.path = result_dir / f"{FILE_PREFIX}_{stamp()}_{os.getpid()}.json"
        self.reports: dict[str, list] = {}
        self.lock = threading.Lock()

    def new_report(self, content: list) -> str:
        with self.lock:
            moment = time.time_ns()
            while (name := f"report_{stamp(moment)}_{threading.get_native_id()}") in self.reports:
                moment += 1_000_000
            self.reports[name] = content
            write_json_atomic(self.path, self.reports, indent=4)
            return name

    def write(self, name: str, content: list) -> None:
        with self.lock:
            self.reports[name] = content
            write_json_atomic(self.path, self.reports, indent=4)


class _Report:
    """One tuning task: its ``basic`` part, its summary and its timing; subclasses add OPAT or SGAT."""

    section = ""

    def __init__(self, result_dir: Path, tuning_name: str):
        result_dir = Path(result_dir).absolute()
        with _files_lock:
            where = (result_dir, os.getpid())
            if where not in _files:
                _files[where] = _ResultFile(result_dir)
            self._file = _files[where]
        self.tuning_name = tuning_name
        self.summary = RepoSummary()
        self.in_step: list[dict] = []          # perfsight's addition: the winners' in-step trials
        self.end_to_end: dict | None = None
        self._started = time.monotonic()
        self._seconds: int | None = None
        self.name = self._file.new_report(self._content())

    @property
    def path(self) -> Path:
        return self._file.path

    def _content(self) -> list:
        basic = {"tuning_name": self.tuning_name}
        if self._seconds is not None:
            basic["tuning_time(s)"] = self._seconds
        section = self._section()
        proof = {"signatures": self.in_step, "end_to_end": self.end_to_end} if self.in_step else None
        return [{"basic": basic}] + ([{self.section: section}] if section is not None else []) + (
            [{IN_STEP: proof}] if proof else [])

    def proven(self, name: str, before: str, after: str, figures: dict) -> None:
        """The in-step trial of the winner of ``name`` (an op_name or a repo_key): ``figures`` (default,
        best-alone and in-step times, the decision); a rejected winner's update mode goes from ``before`` to
        ``after`` in repo_summary and it leaves the modified lists (``_unlist``)."""
        if before != after:
            self.summary.move(before, after)
            self._unlist(name)
        self.in_step.append({"name": name, "update_mode": after, **figures})
        self._save()

    def proven_end_to_end(self, figures: dict | None) -> None:
        """The default against the kept winners together (``verify.Verdict.as_dict``), None when none was kept."""
        self.end_to_end = figures
        self._save()

    def _unlist(self, name: str) -> None:
        raise NotImplementedError

    def _section(self) -> dict | None:
        raise NotImplementedError

    def _save(self) -> None:
        self._file.write(self.name, self._content())

    def _finish_timing(self) -> None:
        self._seconds = round(time.monotonic() - self._started)


class OpatReport(_Report):
    """Operator tuning (AOE_MODE=2): the OPAT part, present once an operator was tuned or failed."""

    section = "OPAT"

    def __init__(self, result_dir: Path, tuning_name: str):
        self.status = INCOMPLETE
        self.modified: list[dict] = []
        self.failed_operators: list[str] = []
        super().__init__(result_dir, tuning_name)

    def operator(self, op_name: str, op_type: str | list[str], tune_mode: str, *, before_us: float,
                 after_us: float, update_mode: str) -> None:
        """One tuned operator: ``tune_mode`` is what was tuned (the seed's Format, Schedule or Impl);
        ``update_mode`` is what ``Bank.put`` returned. Added and updated strategies are listed."""
        self.summary.record(update_mode)
        if update_mode in MODIFIED:
            record = next((r for r in self.modified if r["op_name"] == op_name), None)
            if record is None:
                record = {"op_name": op_name, "op_type": op_type, "tune_performance": {}}
                self.modified.append(record)
            record["tune_performance"][tune_mode] = {
                "performance_after_tune(us)": round(after_us, 3),
                "performance_before_tune(us)": round(before_us, 3),
                "performance_improvement": improvement(before_us, after_us),
                "update_mode": update_mode}
        self._save()

    def _unlist(self, name: str) -> None:
        self.modified = [r for r in self.modified if r["op_name"] != name]

    def failed(self, op_name: str, update_mode: str = "unsatisfied") -> None:
        """An operator whose tuning failed (listed under tuning_failed_operators when the task failed);
        ``update_mode`` (``bank.kept_mode``) is what it counts as in repo_summary."""
        self.summary.record(update_mode)
        self.failed_operators.append(op_name)
        self._save()

    def finish(self, status: str | None = None) -> None:
        """End the task: ``status`` is one of the seed's three; by default failed when an operator failed."""
        status = status or (FAILED if self.failed_operators else SUCCESSFUL)
        if status not in STATUSES:
            raise ValueError(f"opat_tuning_result {status!r} is not one of {', '.join(STATUSES)}")
        self.status = status
        self._finish_timing()
        self._save()

    def _section(self) -> dict | None:
        if self.summary.total == 0 and not self.failed_operators:
            return None
        section = {"opat_tuning_result": self.status, "repo_modified_operators": self.modified,
                   "repo_summary": self.summary.as_dict()}
        if self.status == FAILED:
            section["tuning_failed_operators"] = self.failed_operators
        return section


class StepReport(OpatReport):
    """perfsight's step-settings stage (tune/optat.py), a task of its own: its part, ``perfsight_step_settings``,
    is laid out as OPAT's, each optimizer an operator (``op_type`` its class, ``tune_mode`` Impl)."""

    section = STEP_SETTINGS


class SgatReport(_Report):
    """Subgraph tuning (AOE_MODE=1): the SGAT part, absent when the task failed."""

    section = "SGAT"

    def __init__(self, result_dir: Path, tuning_name: str):
        self.status = ""  # set by finish
        self.failed_task = False
        self.failed_regions = 0
        self.model_ms: tuple[float, float] | None = None
        self.added: list[dict] = []
        self.updated: list[dict] = []
        super().__init__(result_dir, tuning_name)

    def subgraph(self, repo_key: str, *, before_ms: float, after_ms: float, update_mode: str) -> None:
        """One tuned subgraph; ``update_mode`` is what ``Bank.put`` returned."""
        self.summary.record(update_mode)
        if update_mode in MODIFIED:
            (self.added if update_mode == "add" else self.updated).append({
                "performance_after_tune(ms)": round(after_ms, 6),
                "performance_before_tune(ms)": round(before_ms, 6),
                "performance_improvement": improvement(before_ms, after_ms),
                "repo_key": repo_key})
        self._save()

    def _unlist(self, name: str) -> None:
        self.added = [r for r in self.added if r["repo_key"] != name]
        self.updated = [r for r in self.updated if r["repo_key"] != name]

    def failed(self, update_mode: str = "unsatisfied") -> None:
        """A subgraph whose tuning failed: counted in repo_summary as ``update_mode`` (``bank.kept_mode``);
        the seed's SGAT part has no list of them."""
        self.summary.record(update_mode)
        self.failed_regions += 1
        self._save()

    def model(self, baseline_ms: float, result_ms: float) -> None:
        """The whole model's time before and after tuning."""
        self.model_ms = (baseline_ms, result_ms)
        self._save()

    def finish(self, status: str | None = None) -> None:
        """End the task: by default failed when every subgraph tried failed (then, as the seed says, the
        SGAT part is absent)."""
        every_one_failed = self.failed_regions and self.failed_regions == self.summary.total
        status = status or (FAILED if every_one_failed else SUCCESSFUL)
        if status not in (SUCCESSFUL, FAILED):
            raise ValueError(f"subgraph tuning ends {SUCCESSFUL!r} or {FAILED!r}, not {status!r}")
        self.status = status
        self.failed_task = status == FAILED
        self._finish_timing()
        self._save()

    def _section(self) -> dict | None:
        if self.failed_task or (self.summary.total == 0 and self.model_ms is None):
            return None
        section = {"repo_modified_subgraphs": {"add_repo_subgraphs": self.added,
                                               "update_repo_subgraphs": self.updated},
                   "repo_summary": self.summary.as_dict()}
        if self.model_ms is not None:
            baseline, result = self.model_ms
            section.update({"model_baseline_performance(ms)": round(baseline, 6),
                            "model_performance_improvement": improvement(baseline, result),
                            "model_result_performance(ms)": round(result, 6)})
        return section
