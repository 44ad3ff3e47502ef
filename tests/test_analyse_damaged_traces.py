"""Every analysis of the Run API on damaged real traces (cut, a byte changed, a stretch deleted, junk
inserted): results, or an InputError that says what is wrong; never another exception."""
import gzip
import random

import pytest

import perfsight
from perfsight.errors import InputError
from perfsight.run import Run

TRACES = ["hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",                 # ROCm
          "generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz",             # CPU, memory events
          "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"]  # CUDA
JUNK = [b'"', b"{", b"}", b",", b"null", b"-1e999", b'"ts": "x",', b"99999999999999999999999"]
#: the analyses that need arguments beyond the run
NEEDS_ARGUMENTS = {"sql", "alive_at", "alive_by_op_at"}


def damaged(raw: bytes, how: str, rng: random.Random) -> bytes:
    at = rng.randrange(len(raw))
    if how == "cut":
        return raw[:at]
    if how == "changed":
        return raw[:at] + bytes([rng.choice(b'{}[]",:0123456789aeE.-')]) + raw[at + 1:]
    if how == "deleted":
        return raw[:at] + raw[at + rng.randint(1, 200):]
    return raw[:at] + rng.choice(JUNK) + raw[at:]


def analyses() -> list[str]:
    return sorted(name for name in vars(Run)
                  if not name.startswith("_") and name not in NEEDS_ARGUMENTS and callable(getattr(Run, name)))


def test_the_analyses_listed_are_the_run_api():
    assert {"temporal_breakdown", "kernel_breakdown", "step_trace", "memory_peak", "data_verdict",
            "op_shapes_by_step", "launch_stats", "collective_summary"} <= set(analyses())


@pytest.mark.parametrize("how", ["cut", "changed", "deleted", "inserted"])
@pytest.mark.parametrize("trace", TRACES)
def test_every_analysis_of_a_damaged_trace_gives_results_or_input_error(shared_data, tmp_path, trace, how):
    raw = gzip.decompress((shared_data / "kineto" / trace).read_bytes())
    rng = random.Random(f"{trace} {how}")
    for copy in range(2):
        path = tmp_path / f"{copy}.pt.trace.json"
        path.write_bytes(damaged(raw, how, rng))
        try:
            run = perfsight.open(path, use_cache=False)
        except InputError as error:
            assert path.name in str(error)
            continue
        for name in analyses():
            try:
                getattr(run, name)()
            except InputError as error:
                assert str(error), name
