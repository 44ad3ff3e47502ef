"""TunableOp GEMM selection as a setting of the training step, on GPUs: tuned into the bank, proven in the step,
switched step by step.

torch's TunableOp (``torch.cuda.tunable``) routes the GEMMs of a CUDA or ROCm build through tunable operators:
with tuning on, the first call of each GEMM shape benchmarks every implementation the build has (on ROCm,
rocBLAS and hipBLASLt solutions; on CUDA, cuBLAS's own, "Default") and keeps the fastest; enabled with tuning
off, each GEMM runs what its results say. Its results file (``RESULTS``, kept in the bank directory) is CSV:
``Validator,NAME,VALUE`` lines - the versions the tunings hold for - then ``OPERATOR,PARAMS,SOLUTION[,MS]`` lines
(``read_results``). TunableOp refuses, silently, a file whose validators differ from the running versions;
``stale`` says which.

One setting per device: the signature (``signature``) is the device and torch's version. ``tune_tunableop``
runs the training step twice with tuning on (every GEMM shape of the step is tuned then), writes the results
(``get_validators`` and ``get_results``, since torch writes its own file only at exit), then times steps with
TunableOp on (tuning off, the results read) against off, interleaved, each checked from the same gradients:
the parameters' gradients of one step must agree within the dtype's tolerance (``measure``). A winner goes to
the in-step proof like every switchable one; ``Switch`` (used by ``apply.AppliedTunableOp``) turns it on and
off between steps. ``tune_setting`` is the step stage's part: the row of this device's setting. ``tunable`` is
the ``torch.cuda.tunable`` module, or a stand-in (tests have no GPU).
"""
from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from perfsight.core.errors import TuneBankError
from perfsight.core.jsonfile import write_text_atomic
from perfsight.tune.bank import Bank
from perfsight.tune.measure import EXPECTED_STEPS, Measurement, measure
from perfsight.tune.opat import tune_one
from perfsight.tune.optat import SettingResult

#: the results file in the bank directory, and the candidate's name and mode
RESULTS = "tunableop_results.csv"
NAME, MODE = "tunableop", "Impl"
#: tuning runs of the step: the first meets every GEMM shape and tunes it, the second runs the results
TUNING_RUNS = 2


def available() -> bool:
    """Whether this machine has a GPU TunableOp can act on."""
    return torch.cuda.is_available()


def signature() -> dict:
    """The bank signature of the TunableOp setting on this device."""
    return {"tunableop": "gemm", "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "gpu_runtime": torch.version.hip or torch.version.cuda}


def describe(sig: dict) -> str:
    """A signature in a few words, for a row of the tuning result."""
    return f"TunableOp GEMMs on {sig['device']}"


def results_text(validators, results) -> str:
    """TunableOp's results file of ``validators`` ((name, value) pairs) and ``results`` ((operator, params,
    solution, ms) tuples)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows(("Validator", name, value) for name, value in validators)
    writer.writerows((op, params, solution, f"{float(ms):g}") for op, params, solution, ms in results)
    return out.getvalue()


def read_results(path: Path) -> tuple[dict[str, str], list[tuple[str, str, str, float | None]]]:
    """The validators and the tuned GEMMs of a results file; a TuneBankError names the file, the line and what
    is allowed when one is not of TunableOp's shape."""
    validators, results = {}, []
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise TuneBankError(f"the TunableOp results {path} cannot be read ({error}): move it away and tune "
                            "again") from None
    for number, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row:
            continue
        if row[0] == "Validator" and len(row) == 3:
            validators[row[1]] = row[2]
            continue
        try:
            if len(row) not in (3, 4):
                raise ValueError(f"{len(row)} fields")
            results.append((row[0], row[1], row[2], float(row[3]) if len(row) == 4 and row[3] else None))
        except ValueError as error:
            raise TuneBankError(f"the TunableOp results {path} are damaged: line {number} ({','.join(row)}): "
                                f"{error}; allowed: Validator,NAME,VALUE or OPERATOR,PARAMS,SOLUTION[,MS]. Move it "
                                "away and tune again (perfsight never overwrites it)") from None
    return validators, results


def stale(validators: dict[str, str]) -> list[str]:
    """What differs between the torch version the tunings hold for and the running one (empty: fresh)."""
    recorded = validators.get("PT_VERSION")
    return [] if recorded in (None, torch.__version__) else [f"PT_VERSION: results {recorded}, running "
                                                               f"{torch.__version__}"]


class Switch:
    """TunableOp turned on with ``path``'s results and tuning off (``on()``), and off (``off()``)."""

    def __init__(self, path: Path, tunable=None):
        self.path, self.tunable = Path(path), tunable if tunable is not None else torch.cuda.tunable
        self._read = False

    def on(self) -> None:
        self.tunable.enable(True)
        self.tunable.tuning_enable(False)
        if not self._read:
            if not self.tunable.read_file(str(self.path)):
                raise TuneBankError(f"TunableOp did not take the results {self.path}: tune again")
            self._read = True

    def off(self) -> None:
        self.tunable.enable(False)


def tune_gemms(step: Callable[[], object], path: Path, tunable=None) -> int:
    """Tune every GEMM shape of ``step()`` into the results file ``path`` (module docstring); returns how many
    were tuned. TunableOp is left off."""
    tunable = tunable if tunable is not None else torch.cuda.tunable
    tunable.enable(True)
    tunable.tuning_enable(True)
    try:
        for _ in range(TUNING_RUNS):
            step()
        results = list(tunable.get_results())
        write_text_atomic(Path(path), results_text(tunable.get_validators(), results))
    finally:
        tunable.tuning_enable(False)
        tunable.enable(False)
    return len(results)


def tune_tunableop(step: Callable[[], object], model: torch.nn.Module, directory: Path, *,
                   timer: Callable[[], int] | None = None, warmup: int = 3, repeats: int = 15, margin: float = 0.03,
                   tunable=None) -> Measurement | None:
    """Tune ``step()``'s GEMMs into ``directory``'s results file, then time the step with TunableOp against
    without, checked on ``model``'s gradients (module docstring); None when the step has no GEMM to tune."""
    path = Path(directory) / RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    if not tune_gemms(step, path, tunable):
        return None
    switch = Switch(path, tunable)
    params = [p for p in model.parameters() if p.requires_grad]

    def runner(on: bool) -> Callable[[], tuple]:
        def go() -> tuple:
            (switch.on if on else switch.off)()
            try:
                for p in params:
                    p.grad = None
                step()
                return tuple(None if p.grad is None else p.grad.detach().clone() for p in params)
            finally:
                switch.off()
        return go
    saved = [None if p.grad is None else p.grad.detach().clone() for p in params]
    try:
        return measure(runner(False), [(NAME, MODE, {"results": RESULTS}, runner(True))],
                       timer=timer or time.perf_counter_ns, warmup=warmup, repeats=repeats, margin=margin,
                       gradients=len(params))
    finally:
        for p, grad in zip(params, saved):
            p.grad = grad


@dataclass
class GemmResult(SettingResult):
    """The tuned TunableOp setting of this device."""

    describe = staticmethod(describe)


def tune_setting(step: Callable[[], object], model: torch.nn.Module, *, bank: Bank, report=None, repeat: bool = False,
                 timer: Callable[[], int] | None = None, warmup: int = 3, repeats: int = 15, margin: float = 0.03,
                 expected_steps: int = EXPECTED_STEPS) -> list[GemmResult]:
    """The TunableOp setting of this device tuned on ``step()`` into ``bank`` (``tune_tunableop``), as the step
    stage's row; none without a GPU."""
    if not available():
        return []
    sig = signature()
    done = tune_one("step", bank.key("step", sig), NAME, sig, "TunableOp", lambda: tune_tunableop(
        step, model, bank.directory, timer=timer, warmup=warmup, repeats=repeats, margin=margin),
        bank=bank, report=report, repeat=repeat, made=GemmResult, expected_steps=expected_steps, calls_per_step=1.0)
    return [done] if done is not None else []
