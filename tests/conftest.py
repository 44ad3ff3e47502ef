"""Shared test helpers: where the real traces of ../shared/data are, and the summary-base-dirs the insight
API and browser tests serve (``runs_dir``, ``flops_dir``)."""
import shutil
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the real traces are not beside the checkout ({SHARED_DATA})")
    return SHARED_DATA


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory, shared_data) -> Path:
    """A summary-base-dir shared by the page tests (copies: nothing is written beside ../shared/data):

    - ``perfsight/PROF_...``: a real 4-step perfsight run (tiny MLP, DataLoader, memory and host sampling);
    - ``gpu/df_index_resolver.json.gz``: the largest real GPU trace (53.7 MB of JSON);
    - ``cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz``: a torch 2.13 CPU trace with shapes, memory and stacks;
    - ``resnet50/worker0...pt.trace.json.gz``: a GPU ResNet-50 training trace (kineto_tb_plugin sample).
    """
    from tests.analysis.planted_host import CPU_TRACE, _train

    base = tmp_path_factory.mktemp("insight_runs")
    _train(base / "perfsight")
    kineto = shared_data / "kineto"
    for folder, source in (("gpu", kineto / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"),
                           ("cpu", shared_data / CPU_TRACE),
                           ("resnet50", next((kineto / "kineto_tb_plugin" / "samples" /
                                              "resnet50_num_workers_0").glob("*.pt.trace.json.gz")))):
        (base / folder).mkdir()
        shutil.copy(source, base / folder / source.name)
    return base


@pytest.fixture(scope="session")
def flops_dir(tmp_path_factory, shared_data) -> Path:
    """A summary-base-dir with the real torch 2.13 CPU trace (which carries no FLOPs) given torch's FLOPs
    of its matrix products (``flops`` = 2 x M x K x N on every aten::addmm, from its ``Input Dims``
    ``[[N], [M, K], [K, N]]``) and an A100 in ``deviceProperties``, so the FLOPs pages have numbers and a
    peak: ``cpu_flops/cpu_mlp_rs_mem_stack.pt.trace.json``."""
    import gzip
    import json

    from tests.analysis.planted_host import CPU_TRACE

    with gzip.open(shared_data / CPU_TRACE, "rt") as f:
        trace = json.load(f)
    for event in trace["traceEvents"]:
        if event.get("name") == "aten::addmm" and event.get("ph") == "X":
            (_, (m, k), (_, n), *_) = event["args"]["Input Dims"]
            event["args"]["flops"] = 2 * m * k * n
    trace["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}]
    base = tmp_path_factory.mktemp("insight_flops")
    (base / "cpu_flops").mkdir()
    (base / "cpu_flops" / "cpu_mlp_rs_mem_stack.pt.trace.json").write_text(json.dumps(trace))
    return base
