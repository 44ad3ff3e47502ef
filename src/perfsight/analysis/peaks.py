"""Peak floating-point throughput of a device, for FLOPS utilisation (Insight's "FLOPS利用率: 通过FLOPS除以
设备峰值FLOPS得到").

GPUs: dense (no structured sparsity) peaks from NVIDIA's and AMD's datasheets, in FLOP/s, per precision:
``fp32`` (NVIDIA: CUDA cores; AMD Instinct: matrix cores, which rocBLAS uses for fp32 GEMMs), ``tf32``,
``fp16`` and ``bf16`` (tensor/matrix cores; GeForce cards with FP32 accumulate, which is what PyTorch
uses). A precision the GPU lacks (V100/T4 have no TF32 or BF16 tensor cores) is None. An MI250/MI250X
is two devices to PyTorch (one per GCD): its entries are per GCD. Names are matched against Kineto's
``deviceProperties[].name`` (e.g. ``NVIDIA A100-SXM4-80GB``): the first entry of ``GPU_PEAKS`` all of
whose tokens appear in the name (case-insensitive) wins, so variants come before their family. ROCm may
name an Instinct GPU just ``AMD Radeon Graphics``: those are known by their architecture and compute
units (``AMD_BY_COMPUTE_UNITS``).

CPUs: no table. ``cpu_peak`` estimates cores x frequency x FLOPs per cycle per core, where the default
``CPU_FLOPS_PER_CYCLE`` (fp32: 32 = 2 FMA units x 8 fp32 lanes of AVX2 x 2 FLOPs per FMA; fp64: 16) is
a documented assumption, not a measurement. Without the core count and the frequency the peak is
unknown.
"""
from __future__ import annotations

import json

TERA = 1e12

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")

#: (tokens that must all appear in the device name, {precision: dense peak FLOP/s})
GPU_PEAKS: list[tuple[tuple[str, ...], dict[str, float | None]]] = [
    (("h100", "pcie"), {"fp32": 51.2 * TERA, "tf32": 378 * TERA, "fp16": 756 * TERA, "bf16": 756 * TERA}),
    (("h100", "nvl"), {"fp32": 60 * TERA, "tf32": 417.5 * TERA, "fp16": 835.5 * TERA, "bf16": 835.5 * TERA}),
    (("h100",), {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "fp16": 989.4 * TERA, "bf16": 989.4 * TERA}),  # SXM
    (("a100",), {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "fp16": 312 * TERA, "bf16": 312 * TERA}),
    (("v100", "pcie"), {"fp32": 14 * TERA, "tf32": None, "fp16": 112 * TERA, "bf16": None}),
    (("v100",), {"fp32": 15.7 * TERA, "tf32": None, "fp16": 125 * TERA, "bf16": None}),  # SXM2
    (("t4",), {"fp32": 8.1 * TERA, "tf32": None, "fp16": 65 * TERA, "bf16": None}),
    (("a10",), {"fp32": 31.2 * TERA, "tf32": 62.5 * TERA, "fp16": 125 * TERA, "bf16": 125 * TERA}),
    (("l4",), {"fp32": 30.3 * TERA, "tf32": 60 * TERA, "fp16": 121 * TERA, "bf16": 121 * TERA}),
    (("rtx", "3090"), {"fp32": 35.6 * TERA, "tf32": 35.6 * TERA, "fp16": 71 * TERA, "bf16": 71 * TERA}),
    (("rtx", "4090"), {"fp32": 82.6 * TERA, "tf32": 82.6 * TERA, "fp16": 165.2 * TERA, "bf16": 165.2 * TERA}),
    (("h200",), {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "fp16": 989.4 * TERA, "bf16": 989.4 * TERA}),
    (("a30",), {"fp32": 10.3 * TERA, "tf32": 82 * TERA, "fp16": 165 * TERA, "bf16": 165 * TERA}),
    (("l40s",), {"fp32": 91.6 * TERA, "tf32": 183 * TERA, "fp16": 362 * TERA, "bf16": 362 * TERA}),
    (("mi300x",), {"fp32": 163.4 * TERA, "tf32": 653.7 * TERA, "fp16": 1307.4 * TERA, "bf16": 1307.4 * TERA}),
    (("mi250x",), {"fp32": 47.9 * TERA, "tf32": None, "fp16": 191.5 * TERA, "bf16": 191.5 * TERA}),  # per GCD
    (("mi250",), {"fp32": 45.3 * TERA, "tf32": None, "fp16": 181 * TERA, "bf16": 181 * TERA}),  # per GCD
    (("mi210",), {"fp32": 45.3 * TERA, "tf32": None, "fp16": 181 * TERA, "bf16": 181 * TERA}),
    (("mi100",), {"fp32": 46.1 * TERA, "tf32": None, "fp16": 184.6 * TERA, "bf16": 92.3 * TERA}),
]

#: (computeMajor, computeMinor, numSms) of an AMD GPU ROCm names generically -> the GPU_PEAKS name it is
AMD_BY_COMPUTE_UNITS = {
    (9, 0, 104): "AMD Instinct MI210 / MI250 (one GCD)",   # gfx90a, 104 CUs
    (9, 0, 110): "AMD Instinct MI250X (one GCD)",          # gfx90a, 110 CUs
}

#: assumed FLOPs per cycle per core for the CPU estimate (AVX2, two FMA units)
CPU_FLOPS_PER_CYCLE = {"fp32": 32, "fp64": 16}


def _tokens(name: str) -> set[str]:
    import re

    return set(re.split(r"[^a-z0-9]+", name.lower()))


def gpu_peak(name: str, precision: str = "fp32") -> float | None:
    """The dense peak FLOP/s of the GPU called ``name`` at ``precision``, None when unknown."""
    words = _tokens(name)
    for tokens, peaks in GPU_PEAKS:
        if set(tokens) <= words:
            return peaks.get(precision)
    return None


def cpu_peak(cores: int | None, freq_hz: float | None, precision: str = "fp32",
             flops_per_cycle: int | None = None) -> float | None:
    """cores x freq_hz x FLOPs per cycle per core (default ``CPU_FLOPS_PER_CYCLE``); None if unknown."""
    per_cycle = flops_per_cycle or CPU_FLOPS_PER_CYCLE.get(precision)
    if not cores or not freq_hz or not per_cycle:
        return None
    return float(cores) * float(freq_hz) * per_cycle


def device_properties(meta: dict[str, str]) -> list[dict]:
    """The devices of Kineto's ``deviceProperties`` (meta ``device_properties``, JSON text as the trace had
    it): the objects of its list; [] when it is missing or not a list."""
    try:
        devices = json.loads(meta.get("device_properties") or "[]")
    except ValueError:
        return []
    return [device for device in devices if isinstance(device, dict)] if isinstance(devices, list) else []


def _known_name(device: dict) -> str:
    """The device's name, or the Instinct model a generically named AMD GPU's properties identify."""
    name = str(device["name"])
    if gpu_peak(name) is None and name.lower().startswith("amd"):
        key = (device.get("computeMajor"), device.get("computeMinor"), device.get("numSms"))
        return AMD_BY_COMPUTE_UNITS.get(key, name)
    return name


def _cpu_freq_hz(device: dict) -> float | None:
    for key, scale in (("max_freq_hz", 1.0), ("freq_hz", 1.0), ("max_freq_mhz", 1e6), ("freq_mhz", 1e6)):
        if device.get(key):
            return float(device[key]) * scale
    return None


def device_peak(meta: dict[str, str], precision: str = "fp32",
                peak_flops: float | None = None) -> tuple[float | None, str]:
    """(peak FLOP/s, where it came from) for a run's meta dict.

    Sources, first that applies: ``argument`` (``peak_flops`` given); ``table:<gpu name> <precision>`` (the
    first GPU of ``device_properties`` found in ``GPU_PEAKS``); ``estimate:cpu <cores> cores x <GHz> GHz x
    <n> FLOP/cycle`` (a perfsight run on a CPU whose manifest gives cores and frequency); else ``unknown``
    (peak None), e.g. a GPU missing from the table or a CPU of unknown frequency.
    """
    if peak_flops is not None:
        return float(peak_flops), "argument"
    gpus = [d for d in device_properties(meta) if d.get("name")]
    if gpus:
        name = _known_name(gpus[0])
        peak = gpu_peak(name, precision)
        return (peak, f"table:{name} {precision}") if peak else (None, "unknown")
    try:
        device = (json.loads(meta.get("manifest") or "{}") or {}).get("device") or {}
    except ValueError:
        device = {}
    if device.get("device", "cpu") == "cpu":
        cores = device.get("physical_cores") or device.get("logical_cores")
        freq = _cpu_freq_hz(device)
        per_cycle = CPU_FLOPS_PER_CYCLE.get(precision)
        peak = cpu_peak(cores, freq, precision)
        if peak:
            return peak, f"estimate:cpu {cores} cores x {freq / 1e9:g} GHz x {per_cycle} FLOP/cycle"
    return None, "unknown"
