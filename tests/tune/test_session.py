"""perfsight.tune.tune: a real small task, and each precondition failing with a clear message."""
import json
from collections import namedtuple

import pytest
import torch

import perfsight
import perfsight.tune
from perfsight.core.errors import OptionError, TunePreconditionError
from perfsight.tune import session
from tests.tune.models import example


def test_a_small_real_task(tmp_path):
    torch.set_num_threads(1)
    model, x = example()
    result = perfsight.tune.tune(model, x, bank=tmp_path / "bank", result_dir=tmp_path / "out", warmup=1,
                                 repeats=3)
    assert perfsight.tune_model is perfsight.tune.tune
    assert result.report.parent == tmp_path / "out" and result.bank.parent == tmp_path / "bank"
    assert result.repo_summary["total_num"] == 6 and all(c.ok for c in result.preconditions)
    assert {c.name.split(" at ")[0] for c in result.preconditions} == {"profiling off", "static shapes",
                                                                       "free disk", "free memory"}
    [(name, task)] = json.loads(result.report.read_text()).items()
    assert name.startswith("report_") and task[0]["basic"]["tuning_name"] == "Small"
    assert task[1]["OPAT"]["opat_tuning_result"] == "tuning successful"
    entries = json.loads(next(result.bank.glob("opat.json")).read_text())["entries"]
    assert len(entries) == 6
    assert set(result.winners) <= {o.op_name for o in result.opat.operators}


def test_too_little_disk_is_refused_before_tuning(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(session.shutil, "disk_usage", lambda path: usage(1 << 40, 1 << 40, 100 << 20))
    model, x = example()
    with pytest.raises(TunePreconditionError, match=r"free disk at .*found 0\.10 GiB; needed 1\.00 GiB"):
        perfsight.tune.tune(model, x, bank=tmp_path / "bank", result_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "bank").exists()


def test_dynamic_shapes_are_refused(tmp_path):
    model, _ = example()
    sizes = iter([8, 12])

    def step():
        model(torch.randn(2, 3, next(sizes), 8)).mean().backward()
    with pytest.raises(TunePreconditionError,
                       match=r"static shapes: FAILED \(found \d+ ops change shape \(first: Small/"):
        perfsight.tune.tune(model, step=step, bank=tmp_path / "bank", result_dir=tmp_path / "out")


def test_an_active_profiler_is_refused(tmp_path):
    model, x = example()
    with torch.profiler.profile(), pytest.raises(TunePreconditionError, match="torch.profiler active"):
        perfsight.tune.tune(model, x, bank=tmp_path / "bank", result_dir=tmp_path / "out")


def test_an_unknown_mode_is_refused(tmp_path):
    with pytest.raises(OptionError, match="tuning mode 'graph' is not allowed"):
        perfsight.tune.tune(*example(), mode="graph", bank=tmp_path)
