"""The run directory's manifest: the CPU facts it records (the frequency and instruction sets the FLOPs peak
estimate needs), and its rewrite when the disk is full."""
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
    facts["cpu_flags"] = ["avx2", "fma"]
    peak, source = device_peak({"manifest": json.dumps({"device": facts})})
    if recorded:   # 4 cores x the frequency x 32 fp32 FLOP per cycle (AVX2 with FMA)
        assert peak == 4 * next(iter(recorded.values())) * 1e6 * 32 and source.startswith("estimate:cpu 4 cores")
    else:
        assert (peak, source) == (None, "unknown")


@pytest.mark.parametrize("cpuinfo, recorded", [
    ("processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512_bf16 amx_tile ht lm\n\n"
     "processor\t: 1\nflags\t\t: fpu\n", {"cpu_flags": ["amx_tile", "avx", "avx2", "avx512_bf16", "avx512f",
                                                       "fma", "sse", "sse2"]}),
    ("processor\t: 0\nFeatures\t: fp asimd evtstrm sve\n", {"cpu_flags": ["asimd", "sve"]}),   # Arm
    ("processor\t: 0\n", {}),
    (None, {}),                                                                             # no /proc/cpuinfo
])
def test_a_cpu_run_records_its_vector_instruction_sets(tmp_path, cpuinfo, recorded):
    path = tmp_path / "cpuinfo"
    if cpuinfo is not None:
        path.write_text(cpuinfo)
    assert rundir._cpu_flags(path) == recorded


def test_a_full_disk_rewrites_the_manifest_in_place(tmp_path, monkeypatch):
    """No room for a new copy (the atomic write's temp file): the manifest is overwritten in its own blocks."""
    import errno

    run = rundir.RunDirectory(tmp_path)
    run.begin({"rank": 0})

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(rundir, "write_json_atomic", full)
    error = "writing trace window trace_0000.pt.trace.json failed"
    run.update(status="failed", errors=[error])
    written = json.loads((run.path / "manifest.json").read_text())
    assert written["status"] == "failed" and written["errors"] == [error]
    monkeypatch.setattr(rundir, "write_json_atomic", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "no")))
    with pytest.raises(PermissionError):       # other errors are not hidden
        run.update(status="complete")
