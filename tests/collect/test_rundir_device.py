"""The CPU facts a run's manifest records: the frequency the FLOPs peak estimate needs."""
from types import SimpleNamespace

import pytest

from perfsight.analysis.peaks import device_peak
from perfsight.collect import rundir


def _psutil(frequency):
    return SimpleNamespace(cpu_freq=lambda: frequency)


@pytest.mark.parametrize("frequency, expected", [
    (SimpleNamespace(current=2400.0, min=800.0, max=3500.0), {"max_freq_mhz": 3500.0}),
    (SimpleNamespace(current=2596.14, min=0.0, max=0.0), {"freq_mhz": 2596.14}),   # a VM: no maximum
    (SimpleNamespace(current=0.0, min=0.0, max=0.0), {}),
    (None, {}),
])
def test_cpu_frequency(frequency, expected):
    assert rundir._cpu_frequency(_psutil(frequency)) == expected


def test_a_cpu_run_records_what_the_peak_estimate_needs():
    import json

    facts = rundir.device_facts(None, "cpu")
    assert facts["device"] == "cpu" and facts["logical_cores"] >= 1
    peak, source = device_peak({"manifest": json.dumps({"device": facts})})
    if "max_freq_mhz" in facts or "freq_mhz" in facts:   # this machine tells its frequency
        assert peak > 0 and source.startswith("estimate:cpu")
    else:
        assert (peak, source) == (None, "unknown")
