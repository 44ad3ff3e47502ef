"""What a tuning result depends on: the device (its fingerprint names the bank directory) and the library
versions (a bank tuned under other versions is stale).

The facts are readable (``device_facts``); the fingerprint is ``{cpu|cuda}-{12 hex}``, a hash of the
canonical JSON of those facts, so it is stable across processes and short enough for a directory name.
"""
from __future__ import annotations

import hashlib
import json
import platform
import re
from pathlib import Path

#: the /proc/cpuinfo flags that change which kernels run (vector width, VNNI, bf16/fp16, AMX tiles)
ISA_FLAG_RE = re.compile(r"^(avx\w*|amx\w*|fma|f16c|sse4_\d)$")
_ONEDNN_RE = re.compile(r"(?:oneDNN|MKL-DNN) v(\S+)")


def device_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """The readable facts that identify the tuning device: GPU name and compute capability when CUDA is
    available, else CPU model, ISA flags and torch's intra-op thread count."""
    import torch

    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return {"kind": "cuda", "name": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}"}
    model, flags = _cpu_model_and_flags(cpuinfo)
    return {"kind": "cpu", "model": model or platform.processor() or platform.machine(),
            "isa": flags, "threads": torch.get_num_threads()}


def device_fingerprint(facts: dict | None = None) -> str:
    """``{kind}-{hash}``: a stable short name for the device of ``facts`` (default: this one)."""
    facts = device_facts() if facts is None else facts
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:12]
    return f"{facts['kind']}-{digest}"


def library_versions() -> dict:
    """Versions of what the tuned kernels come from: Python, torch, oneDNN, CUDA and cuDNN when present."""
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__}
    if torch.backends.mkldnn.is_available():
        found = _ONEDNN_RE.search(torch.__config__.show())
        versions["onednn"] = found.group(1) if found else "unknown"
    if torch.version.cuda and torch.cuda.is_available():
        versions["cuda"] = torch.version.cuda
        if torch.backends.cudnn.is_available():
            versions["cudnn"] = str(torch.backends.cudnn.version())
    return versions


def _cpu_model_and_flags(cpuinfo: Path) -> tuple[str, list[str]]:
    model, flags = "", []
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return model, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = sorted(flag for flag in value.split() if ISA_FLAG_RE.match(flag))
        if model and flags:
            break
    return model, flags
