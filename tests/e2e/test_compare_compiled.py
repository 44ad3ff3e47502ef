"""perfsight compare on a real pair: the same MLP's training on this CPU, eager (BASE) and under torch.compile
(NEW), each profiled for 6 steps by perfsight.Profiler in its own process. Timings vary from run to run, so the
known answers are the structure: 6 steps a side and a verdict, the eager layers' operators gone (3 linear
layers, 2 ReLUs a step), torch.compile's compiled forward and backward new, once a step each, and the eager
optimizer the same on both sides."""
import subprocess
import sys

import pytest

from perfsight.analysis.compare import FASTER, NO_DIFFERENCE, SLOWER
from perfsight.comparison import compare

from .conftest import run_dirs, script

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    found = {}
    for mode in ("eager", "compiled"):
        out = tmp_path_factory.mktemp(mode)
        done = subprocess.run([sys.executable, script("eager_or_compiled.py"), str(out), mode], capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        [found[mode]] = run_dirs(out)
    return found


def test_eager_against_compiled(runs):
    comparison = compare(runs["eager"], runs["compiled"])
    steps = comparison.steps().to_pylist()[0]
    assert (steps["base_steps"], steps["new_steps"]) == (6, 6)
    assert steps["verdict"] in (SLOWER, FASTER, NO_DIFFERENCE)
    assert steps["ci_low_pct"] <= steps["difference_pct"] <= steps["ci_high_pct"]
    operators = {row["name"]: row for row in comparison.operators().to_pylist()}
    eager = {name: (row["status"], row["base_calls_per_step"]) for name, row in operators.items()}
    assert eager["aten::linear"] == ("vanished", 3)
    assert eager["aten::relu"] == ("vanished", 2)
    compiled = {name: (row["status"], row["new_calls_per_step"]) for name, row in operators.items()}
    assert compiled["CompiledFunction"] == ("new", 1)
    assert compiled["CompiledFunctionBackward"] == ("new", 1)
    # the optimizer runs eagerly in both: SGD adds to each of the 6 parameters a step
    assert (operators["aten::add_"]["status"], operators["aten::add_"]["base_calls_per_step"],
            operators["aten::add_"]["new_calls_per_step"]) == ("both", 6, 6)
