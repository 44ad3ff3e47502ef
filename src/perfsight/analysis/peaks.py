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

CPUs: no table. ``cpu_peak`` estimates cores x frequency x FLOPs per cycle per core, and the FLOPs per
cycle come from the instruction sets the collector found (the manifest's ``cpu_flags``, from
/proc/cpuinfo): ``CPU_ISA_FLOPS`` lists, per instruction set, its vector lanes and the FLOPs one
instruction does per lane, taken times ``CPU_VECTOR_UNITS`` (2 FMA units per core, the count of current
server cores; a CPU with one unit reaches half the estimate). The widest set the CPU has for a precision
wins: AVX-512 gives 2 x 16 fp32 lanes x 2 (FMA) = 64 fp32 FLOP/cycle, AVX2 with FMA 32, AMX's tile unit
1024 bf16 FLOP/cycle. The frequency is the maximum (turbo) the system gives; where it gives only the
current clock (as many VMs do), the estimate says so, since the CPU may boost beyond it. A run recorded
before the collector kept the flags is assumed to have AVX2 with FMA, and the source says that too. The
estimate is meant as an upper bound: a share of it above 100% means it is wrong, which the FLOPs tables
say (``flops.OVER_PEAK_NOTE``). Without the core count and the frequency the peak is unknown.
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
AMD_BY_COMPUTE_UNITS: dict[tuple, str] = {   # (looked up with whatever deviceProperties holds)
    (9, 0, 104): "AMD Instinct MI210 / MI250 (one GCD)",   # gfx90a, 104 CUs
    (9, 0, 110): "AMD Instinct MI250X (one GCD)",          # gfx90a, 110 CUs
}

#: FMA (vector) units per CPU core the estimate assumes
CPU_VECTOR_UNITS = 2

#: (instruction set, the /proc/cpuinfo flags it needs, {precision: (lanes, FLOPs per lane per instruction)}),
#: widest first; x86-64's baseline SSE2 has no flag of its own here and closes the list
CPU_ISA_FLOPS: list[tuple[str, tuple[str, ...], dict[str, tuple[int, int]]]] = [
    ("AMX", ("amx_tile", "amx_bf16"), {"bf16": (512, 2)}),           # one tile unit: 1024 bf16 FLOP/cycle
    ("AVX-512 FP16", ("avx512_fp16",), {"fp16": (32, 2)}),
    ("AVX-512 BF16", ("avx512_bf16",), {"bf16": (32, 2)}),           # vdpbf16ps: 2 products and their sum
    ("AVX-512", ("avx512f",), {"fp32": (16, 2), "fp64": (8, 2)}),
    ("AVX2+FMA", ("avx2", "fma"), {"fp32": (8, 2), "fp64": (4, 2)}),
    ("AVX", ("avx",), {"fp32": (8, 1), "fp64": (4, 1)}),             # separate add and multiply, no FMA
    ("SVE", ("sve",), {"fp32": (8, 2), "fp64": (4, 2)}),             # assumes 256-bit vectors (Neoverse V1)
    ("NEON", ("asimd",), {"fp32": (4, 2), "fp64": (2, 2)}),
    ("SSE2", (), {"fp32": (4, 1), "fp64": (2, 1)}),
]

#: the instruction set assumed for a run whose manifest has no ``cpu_flags`` (recorded before it did)
CPU_ISA_ASSUMED = "AVX2+FMA"

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


def cpu_flops_per_cycle(flags: list[str] | None, precision: str = "fp32") -> tuple[int, str] | None:
    """(FLOPs per cycle per core, how: ``AVX-512: 2 FMA units x 16 fp32 lanes x 2``) of the widest instruction
    set in ``CPU_ISA_FLOPS`` whose flags are all in ``flags`` and that does ``precision``; ``flags`` None
    (not recorded) assumes ``CPU_ISA_ASSUMED``. None when no set does the precision."""
    for isa, needed, rates in CPU_ISA_FLOPS:
        have = set(needed) <= set(flags) if flags is not None else isa in (CPU_ISA_ASSUMED, "SSE2")
        if have and precision in rates:
            lanes, per_lane = rates[precision]
            units = 1 if isa == "AMX" else CPU_VECTOR_UNITS
            how = f"{units} {'tile unit' if isa == 'AMX' else 'FMA units'} x {lanes} {precision} lanes x {per_lane}"
            assumed = "; assumed, the run did not record its CPU's flags" if flags is None else ""
            return units * lanes * per_lane, f"{isa}: {how}{assumed}"
    return None


def cpu_peak(cores: int | None, freq_hz: float | None, flags: list[str] | None,
             precision: str = "fp32") -> tuple[float, str] | None:
    """(cores x freq_hz x ``cpu_flops_per_cycle``, how it was counted); None if any factor is unknown."""
    per_cycle = cpu_flops_per_cycle(flags, precision)
    if not cores or not freq_hz or not per_cycle:
        return None
    return float(cores) * float(freq_hz) * per_cycle[0], f"{per_cycle[0]} FLOP/cycle ({per_cycle[1]})"


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


def _cpu_freq_hz(device: dict) -> tuple[float, str] | None:
    """(the CPU's frequency in Hz, what it is): its maximum, else the current clock."""
    for key, scale, what in (("max_freq_hz", 1.0, "max"), ("freq_hz", 1.0, "current clock, may boost beyond"),
                             ("max_freq_mhz", 1e6, "max"), ("freq_mhz", 1e6, "current clock, may boost beyond")):
        if device.get(key):
            return float(device[key]) * scale, what
    return None


def device_peak(meta: dict[str, str], precision: str = "fp32",
                peak_flops: float | None = None) -> tuple[float | None, str]:
    """(peak FLOP/s, where it came from) for a run's meta dict.

    Sources, first that applies: ``argument`` (``peak_flops`` given); ``table:<gpu name> <precision>`` (the
    first GPU of ``device_properties`` found in ``GPU_PEAKS``); ``estimate:cpu <cores> cores x <GHz> GHz (max
    | current clock ...) x <n> FLOP/cycle (<instruction set>: <units> x <lanes> x <FLOPs per lane>)`` (a
    perfsight run on a CPU whose manifest gives cores and frequency); else ``unknown``
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
        freq, what = _cpu_freq_hz(device) or (None, "")
        flags = device.get("cpu_flags")
        estimate = cpu_peak(cores, freq, flags if isinstance(flags, list) else None, precision)
        if estimate and freq:      # (an estimate has a frequency)
            return estimate[0], f"estimate:cpu {cores} cores x {freq / 1e9:g} GHz ({what}) x {estimate[1]}"
    return None, "unknown"
