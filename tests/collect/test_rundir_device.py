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


def test_a_full_disk_frees_the_runs_reserve_and_then_replaces_the_manifest_whole(tmp_path, monkeypatch):
    """The room a run sets aside is given back when the disk is full, so the closing manifest is still written
    atomically; a run that ends normally gives it back too."""
    import errno

    from perfsight.core import layout

    run = rundir.RunDirectory(tmp_path)
    run.begin({"rank": 0})
    reserve = run.path / layout.MANIFEST_RESERVE
    assert reserve.stat().st_size == rundir.MANIFEST_RESERVE_BYTES
    atomic = rundir.write_json_atomic

    def full_while_reserved(path, data, **kwargs):
        if reserve.exists():
            raise OSError(errno.ENOSPC, "No space left on device")
        atomic(path, data, **kwargs)
    monkeypatch.setattr(rundir, "write_json_atomic", full_while_reserved)
    run.update(status="failed", errors=["no space"])
    assert not reserve.exists() and json.loads((run.path / "manifest.json").read_text())["status"] == "failed"
    second = rundir.RunDirectory(tmp_path)
    second.begin({"rank": 0})
    second.end(status="complete")
    assert not (second.path / layout.MANIFEST_RESERVE).exists()


def test_windows_are_numbered_by_the_run_never_by_the_files_present(tmp_path):
    """Storage ageing deletes windows: naming by the files present would give a new window an old one's name."""
    run = rundir.RunDirectory(tmp_path)
    first = run.next_trace_path()
    first.write_text("{}")
    first.unlink()                                  # aged out
    assert [first.name, run.next_trace_path().name, run.next_trace_path().name] == [
        "trace_0000.pt.trace.json", "trace_0001.pt.trace.json", "trace_0002.pt.trace.json"]


@pytest.mark.parametrize("status, errors, present, said", [
    ("complete", [], 3, "run collected in {run}: steps 0-24 in 3 trace windows (one every 10 steps: flush_every)"),
    ("complete", [], 1, "run collected in {run}: steps 0-24 in 3 trace windows (one every 10 steps: flush_every); "
                        "2 aged out to stay within storage_limit, leaving steps 20-24"),
    ("failed", ["recording a step failed: no space"], 3,
     "run failed in {run}: recording a step failed: no space; kept: steps 0-24 in 3 trace windows (one every 10 "
     "steps: flush_every)"),
    ("collecting", [], 3, "run interrupted in {run}: its process ended without closing it; what was written before "
                          "is kept and readable (steps 0-24 in 3 trace windows (one every 10 steps: flush_every))"),
])
def test_the_run_report_says_how_the_run_ended_and_what_it_kept(tmp_path, status, errors, present, said):
    from perfsight.core import layout

    names = [f"trace_{i:04d}.pt.trace.json" for i in range(3)]
    (tmp_path / layout.HOST_DATA).mkdir(parents=True)
    for name in names[3 - present:]:
        (tmp_path / layout.HOST_DATA / name).write_text("{}")
    manifest = {"status": status, "errors": errors, "traces": names, "steps_collected": list(range(25)),
                "trace_steps": dict(zip(names, (list(range(10)), list(range(10, 20)), list(range(20, 25))))),
                "options_resolved": {"flush_every": 10}}
    assert rundir.run_report(tmp_path, manifest) == said.format(run=tmp_path)
