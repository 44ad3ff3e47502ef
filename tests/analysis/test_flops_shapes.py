"""FLOPs from input shapes, against torch's own FlopCounterMode on the same computation (known answers)."""
import pytest

import perfsight
from perfsight.analysis.flops import op_flops
from perfsight.analysis.flops_shapes import shape_flops

from .planted import MAIN, TRACKS, _slice, tables_from_rows

torch = pytest.importorskip("torch")


def _step():
    """Convolution (strided, padded, transposed), linear, bmm and both attention paths, with backward."""
    torch.manual_seed(0)
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
                               torch.nn.ConvTranspose2d(8, 4, 2, stride=2))
    conv(torch.randn(2, 3, 16, 16)).sum().backward()
    torch.nn.Linear(64, 32)(torch.randn(5, 64)).sum().backward()
    a = torch.randn(3, 4, 6, requires_grad=True)
    torch.bmm(a, torch.randn(3, 6, 5)).sum().backward()
    for value_dim in (12, 16):  # 12: the math path (bmm); 16: the fused CPU flash kernel
        q = torch.randn(2, 4, 8, 16, requires_grad=True)
        torch.nn.functional.scaled_dot_product_attention(q, torch.randn(2, 4, 10, 16),
                                                         torch.randn(2, 4, 10, value_dim)).sum().backward()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        _step()
    expected = {str(op).replace(".", "::", 1): flops for op, flops in counter.get_flop_counts()["Global"].items()}
    trace = tmp_path_factory.mktemp("flops") / "step.pt.trace.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        _step()
    prof.export_chrome_trace(str(trace))
    return perfsight.open(trace).tables, expected


CPU_ATTENTION = "aten::_scaled_dot_product_flash_attention_for_cpu"
# torch's counter has no formula for the CPU kernel: its CUDA twins' (2 x b x h x sq x sk x (d + dv) forward,
# twice that backward), by hand for q [2, 4, 8, 16], k [2, 4, 10, 16], v [2, 4, 10, 16]
CPU_ATTENTION_FLOPS = {CPU_ATTENTION: 2 * 2 * 4 * 8 * 10 * (16 + 16),
                       CPU_ATTENTION + "_backward": 4 * 2 * 4 * 8 * 10 * (16 + 16)}


def _counted(tables) -> dict[str, int]:
    con = tables.connect()
    con.register("estimated", shape_flops(tables))
    return dict(con.sql("SELECT s.name, sum(e.flops)::BIGINT FROM estimated e JOIN slices s USING (id) "
                        "GROUP BY 1").fetchall())


def test_shape_flops_equal_torchs_flop_counter(traced):
    tables, expected = traced
    assert {"aten::convolution", "aten::convolution_backward", "aten::bmm", "aten::addmm", "aten::mm"} == set(expected)
    assert _counted(tables) == {**expected, **CPU_ATTENTION_FLOPS}


def test_op_flops_say_where_their_flops_come_from(traced):
    tables, expected = traced
    rows = {r["op_type"]: r for r in op_flops(tables).to_pylist()}
    assert {name: r["flops"] for name, r in rows.items()} == {**expected, **CPU_ATTENTION_FLOPS}
    assert {r["flops_source"] for r in rows.values()} == {"shapes"}


def test_nested_and_unfit_operators_are_not_counted_and_source_flops_win():
    s = _slice
    slices = [
        s(1, "cpu_op", "aten::convolution", MAIN, 0, 1000, 0,
          input_shapes="[[1, 2, 4, 4], [3, 2, 3, 3], [3], [], [], [], [], [], []]",
          args='{"Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]}'),
        s(2, "cpu_op", "aten::addmm", MAIN, 100, 900, 1, parent=1, input_shapes="[[3], [16, 18], [18, 3]]"),
        s(3, "cpu_op", "aten::mm", MAIN, 2000, 2100, 0, input_shapes="[[4, 5], [6, 7]]"),   # inner dims differ
        s(4, "cpu_op", "aten::mm", MAIN, 3000, 3100, 0, input_shapes="[[4, 5], [5, 7]]"),
    ]
    tables = tables_from_rows(slices=slices, tracks=TRACKS)
    # 2 x N 1 x 16 output positions x 54 weight elements; the addmm inside is the convolution's own work
    assert shape_flops(tables).to_pylist() == [{"id": 1, "flops": 2 * 16 * 54}, {"id": 4, "flops": 2 * 4 * 5 * 7}]
    slices[3]["flops"] = 99
    assert shape_flops(tables_from_rows(slices=slices, tracks=TRACKS)).num_rows == 0
