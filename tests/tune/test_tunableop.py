"""TunableOp GEMM selection as a step setting (tune/tunableop.py), without a GPU: TunableOp's own results file as
its documentation records one, and a stand-in for ``torch.cuda.tunable`` that a fake clock sees."""
import re

import pytest
import torch

from perfsight.core.errors import TuneBankError
from perfsight.tune import tunableop

#: a results file as TunableOp writes it, recorded in torch.cuda.tunable's documentation (ROCm, torch 2.2)
RECORDED = """Validator,PT_VERSION,2.2.0
Validator,ROCM_VERSION,6.0.0.0-12969-1544e39
Validator,HIPBLASLT_VERSION,0.6.0-a9c5cc7
Validator,ROCBLAS_VERSION,4.0.0-72e57364-dirty
GemmTunableOp_float_NT,nt_25088_4096_64,Gemm_Hipblaslt_1219,1.262
GemmTunableOp_float_NT,nt_4096_4096_64,Gemm_Rocblas_1216,0.033
"""
#: what a step costs on the fake clock without TunableOp and with it (us)
WITHOUT_US, WITH_US = 1000, 800


class FakeTunable:
    """``torch.cuda.tunable``'s calls the tuner makes, recorded; its results are RECORDED's."""

    def __init__(self):
        self.enabled = self.tuning = False
        self.calls: list[tuple] = []
        self.read: list[str] = []

    def enable(self, on=True):
        self.enabled = on
        self.calls.append(("enable", on))

    def tuning_enable(self, on=True):
        self.tuning = on
        self.calls.append(("tuning", on))

    def get_validators(self):
        return [("PT_VERSION", torch.__version__), ("ROCM_VERSION", "6.0.0.0-12969-1544e39")]

    def get_results(self):
        return [("GemmTunableOp_float_NT", "nt_8_4_16", "Gemm_Rocblas_1216", 0.033)]

    def read_file(self, path):
        self.read.append(path)
        return True


class Clock:
    """Nanoseconds; a step advances it by what it costs with TunableOp on or off."""

    def __init__(self, tunable: FakeTunable):
        self.now, self.tunable, self.steps = 0, tunable, []

    def __call__(self) -> int:
        return self.now

    def step(self, model, x) -> None:
        model(x).sum().backward()
        self.now += (WITH_US if self.tunable.enabled else WITHOUT_US) * 1000
        self.steps.append((self.tunable.enabled, self.tunable.tuning))


def test_the_recorded_results_file_reads_as_validators_and_tuned_gemms(tmp_path):
    path = tmp_path / tunableop.RESULTS
    path.write_text(RECORDED)
    validators, results = tunableop.read_results(path)
    assert validators == {"PT_VERSION": "2.2.0", "ROCM_VERSION": "6.0.0.0-12969-1544e39",
                          "HIPBLASLT_VERSION": "0.6.0-a9c5cc7", "ROCBLAS_VERSION": "4.0.0-72e57364-dirty"}
    assert results == [("GemmTunableOp_float_NT", "nt_25088_4096_64", "Gemm_Hipblaslt_1219", 1.262),
                       ("GemmTunableOp_float_NT", "nt_4096_4096_64", "Gemm_Rocblas_1216", 0.033)]
    # tuned under torch 2.2.0: TunableOp would drop it without a word; perfsight says why
    assert tunableop.stale(validators) == [f"PT_VERSION: results 2.2.0, running {torch.__version__}"]
    # written back, it is the same file
    assert tunableop.results_text(validators.items(), results) == RECORDED


def test_a_damaged_results_line_is_refused_naming_the_file_and_the_line(tmp_path):
    path = tmp_path / tunableop.RESULTS
    path.write_text(RECORDED + "GemmTunableOp_float_NT,nt_1_1_1\n")
    with pytest.raises(TuneBankError, match=rf"TunableOp results {path} are damaged: line 7 "
                                            r"\(GemmTunableOp_float_NT,nt_1_1_1\): 2 fields; allowed: "
                                            r"Validator,NAME,VALUE or OPERATOR,PARAMS,SOLUTION\[,MS\]"):
        tunableop.read_results(path)


def test_the_step_s_gemms_are_tuned_into_the_bank_then_timed_with_tunableop_on_against_off(tmp_path):
    torch.manual_seed(0)
    model, x = torch.nn.Linear(16, 4), torch.randn(8, 16)
    fake = FakeTunable()
    clock = Clock(fake)
    m = tunableop.tune_tunableop(lambda: clock.step(model, x), model, tmp_path, timer=clock, warmup=1, repeats=5,
                                 tunable=fake)
    # tuning: two runs of the step with TunableOp tuning, then the results written and TunableOp left off
    assert clock.steps[:2] == [(True, True), (True, True)] and not fake.enabled and not fake.tuning
    validators, results = tunableop.read_results(tmp_path / tunableop.RESULTS)
    assert validators["PT_VERSION"] == torch.__version__ and results[0][1] == "nt_8_4_16"
    # then timed: on (tuning off, the results read once) against off; each checked on the gradients
    assert fake.read == [str(tmp_path / tunableop.RESULTS)]
    assert {on for on, tuning in clock.steps[2:]} == {True, False} and not any(t for _, t in clock.steps[2:])
    [candidate] = m.candidates
    assert candidate.ok and m.winner is candidate and (m.default.median_us, candidate.median_us) == (1000.0, 800.0)
    assert candidate.params == {"results": tunableop.RESULTS}


def test_a_step_without_gemms_has_nothing_to_tune(tmp_path):
    fake = FakeTunable()
    fake.get_results = lambda: []
    model = torch.nn.Linear(2, 2)
    assert tunableop.tune_tunableop(lambda: None, model, tmp_path, tunable=fake) is None


def test_the_switch_reads_the_results_once_and_says_when_tunableop_refuses_them(tmp_path):
    fake = FakeTunable()
    switch = tunableop.Switch(tmp_path / tunableop.RESULTS, fake)
    switch.on()
    switch.off()
    switch.on()
    assert fake.calls == [("enable", True), ("tuning", False), ("enable", False), ("enable", True), ("tuning", False)]
    assert len(fake.read) == 1
    fake.read_file = lambda path: False
    with pytest.raises(TuneBankError, match="TunableOp did not take the results .*: tune again"):
        tunableop.Switch(tmp_path / tunableop.RESULTS, fake).on()


@pytest.fixture
def gpu(monkeypatch) -> FakeTunable:
    """A GPU as far as the tuner can tell: a named device, and TunableOp's calls going to a FakeTunable."""
    fake = FakeTunable()
    monkeypatch.setattr(tunableop, "available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "Fake GPU")
    for name in ("enable", "tuning_enable", "get_validators", "get_results", "read_file"):
        monkeypatch.setattr(torch.cuda.tunable, name, getattr(fake, name))
    return fake


def test_on_a_gpu_the_step_stage_tunes_tunableop_proves_it_in_the_step_and_verify_applies_it(tmp_path, gpu):
    import perfsight
    from perfsight.tune.scriptbank import ScriptBank
    from perfsight.tune.verify import verify

    torch.manual_seed(0)
    model, x = torch.nn.Linear(16, 4), torch.randn(8, 16)
    clock = Clock(gpu)

    def step():
        clock.step(model, x)

    result = perfsight.tune.tune(model, step=step, mode="step", bank=tmp_path / "bank", result_dir=tmp_path / "out",
                                 timer=clock, warmup=1, repeats=5)
    [row] = result.rows
    assert (row["where"], row["what"], row["winner"]) == ("tunableop", "TunableOp GEMMs on Fake GPU", "tunableop")
    assert row["in_step"]["decision"] == "kept" and row["in_step"]["speedup_low"] > 1.0   # 1,000 us against 800
    assert not gpu.enabled                                                  # off once tuning is done
    [bank] = (tmp_path / "bank").iterdir()
    assert (bank / tunableop.RESULTS).is_file()
    verdict = verify(step, bank=tmp_path / "bank", rounds=6, warmup=1, timer=clock)
    assert verdict.wins and verdict.applied == {"tunableop": 6 + 1} and not gpu.enabled
    applied = ScriptBank(model, tmp_path / "bank")           # a TunableOp winner alone is a bank to apply
    assert "TunableOp's GEMM results" in applied.describe()
    applied.switch(True)
    assert gpu.enabled and not gpu.tuning
    applied.close()
    assert not gpu.enabled


def test_tunableop_results_tuned_under_another_torch_are_not_applied_and_a_warning_says_why(tmp_path, gpu):
    from perfsight.tune.apply import apply_tunableop
    from perfsight.tune.bank import Bank
    from perfsight.tune.capture import Capture
    from perfsight.tune.session import plan, tune_step_settings

    model, x = torch.nn.Linear(16, 4), torch.randn(8, 16)
    clock = Clock(gpu)
    staged = Bank(tmp_path)
    tune_step_settings(Capture(), plan("step", result_dir=tmp_path / "out"), staged, tuning_name="t", loader_step=None,
                       proof_step=lambda: clock.step(model, x), model=model, timer=clock, warmup=1, repeats=5)
    (staged.directory / tunableop.RESULTS).write_text(RECORDED)               # tuned under torch 2.2.0
    with pytest.warns(UserWarning, match=r"TunableOp results .* are not applied: PT_VERSION: results 2\.2\.0, "
                                         rf"running {re.escape(torch.__version__)}"):
        applied = apply_tunableop(Bank(tmp_path, staged.fingerprint, read_only=True))
    assert not applied.installed
