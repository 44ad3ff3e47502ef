"""The device fingerprint (stable, short, readable facts behind it) and the library versions."""
import subprocess
import sys
from pathlib import Path

import torch

import perfsight
from perfsight.tune.device import device_facts, device_fingerprint, library_versions

CPUINFO = """processor\t: 0
model name\t: Example CPU 9000
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16 amx_tile amx_bf16 ht
processor\t: 1
model name\t: Example CPU 9000
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16 amx_tile amx_bf16 ht
"""


def test_cpu_facts_are_readable(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    facts = device_facts(cpuinfo)
    assert facts == {"kind": "cpu", "model": "Example CPU 9000", "threads": torch.get_num_threads(),
                     "isa": ["amx_bf16", "amx_tile", "avx", "avx2", "avx512_bf16", "avx512f", "fma", "sse4_2"]}


def test_fingerprint_is_stable_short_and_depends_on_the_facts():
    fingerprint = device_fingerprint()
    assert fingerprint.startswith("cpu-") and len(fingerprint) == len("cpu-") + 12
    script = "from perfsight.tune.device import device_fingerprint; print(device_fingerprint())"
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={"PYTHONPATH": str(Path(perfsight.__file__).parents[1]),
                                "OMP_NUM_THREADS": str(torch.get_num_threads())})
    assert other.stdout.strip() == fingerprint
    facts = device_facts()
    assert device_fingerprint(dict(facts, threads=facts["threads"] + 1)) != fingerprint


def test_library_versions():
    versions = library_versions()
    assert versions["torch"] == torch.__version__
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert versions["onednn"][0].isdigit()  # parsed from torch.__config__.show()
    assert ("cuda" in versions) == bool(torch.version.cuda and torch.cuda.is_available())
