"""The CPU facts a run's manifest records: the frequency the FLOPs peak estimate needs."""
import json
from types import SimpleNamespace

import psutil
import pytest

from perfsight.analysis.peaks import device_peak
from perfsight.collect import rundir


@pytest.mark.parametrize("frequency, recorded", [
    (SimpleNamespace(current=2400.0, min=800.0, max=3500.0), {"max_freq_mhz": 3500.0}),
    (SimpleNamespace(current=2500.0, min=0.0, max=0.0), {"freq_mhz": 2500.0}),   # a VM: no maximum
    (SimpleNamespace(current=0.0, min=0.0, max=0.0), {}),
    (None, {}),
])
def test_a_cpu_run_records_its_frequency_and_gets_a_peak_from_it(monkeypatch, frequency, recorded):
    monkeypatch.setattr(psutil, "cpu_freq", lambda: frequency)
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 4)
    facts = rundir.device_facts(None, "cpu")
    assert {k: v for k, v in facts.items() if "freq" in k} == recorded
    peak, source = device_peak({"manifest": json.dumps({"device": facts})})
    if recorded:   # 4 cores x the frequency x 32 fp32 FLOP per cycle
        assert peak == 4 * next(iter(recorded.values())) * 1e6 * 32 and source.startswith("estimate:cpu 4 cores")
    else:
        assert (peak, source) == (None, "unknown")
