"""Peak throughput of a device, per precision, and its peak memory bandwidth: the ceilings of FLOPS
utilisation (Insight's "FLOPS利用率: 通过FLOPS除以设备峰值FLOPS得到"), of MFU and of the roofline.

Accelerators (``DEVICE_PEAKS``): dense (no structured sparsity) peaks from the vendors' datasheets, in
FLOP/s (int8: OP/s), per precision of ``PRECISIONS``: ``fp64`` (NVIDIA/AMD: the tensor/matrix core figure
where the device has one, which cuBLAS/rocBLAS DGEMMs use), ``fp32`` (NVIDIA: CUDA cores; AMD Instinct:
matrix cores, which rocBLAS uses for fp32 GEMMs), ``tf32``, ``fp16``, ``bf16``, ``fp8`` and ``int8``
(tensor/matrix/cube units; GeForce cards at FP32 accumulate, which is what PyTorch uses), and the memory
bandwidth in bytes/s; each entry names its source (``Peaks.source``). A precision the device has no units
for is None there, and ``device_peak`` then takes the precision it runs at instead (``RUNS_AS``: tf32,
fp16 and bf16 without tensor cores run at the fp32 rate: a V100 computes bf16 through fp32 arithmetic), and
says so in the source; fp64, fp8 and int8 have no such stand-in. An MI250/MI250X is two devices to PyTorch
(one per GCD): its entries are per GCD. Names are matched against Kineto's ``deviceProperties[].name``
(e.g. ``NVIDIA A100-SXM4-80GB``) or the Ascend readers' (torch_npu's chip name: ``Ascend910B``,
``Ascend910B3``, ``Ascend 310P3``): the first entry of ``DEVICE_PEAKS`` all of whose tokens appear in the
name (case-insensitive; ``Ascend910B`` reads as ``ascend 910b``) wins, so variants come before their
family. ROCm may name an Instinct GPU just ``AMD Radeon Graphics``: those are known by their architecture
and compute units (``AMD_BY_COMPUTE_UNITS``). An Ascend NPU whose chip the output does not name
(torch_npu's text export: ``Ascend NPU``) has no peak. Huawei publishes no per-SKU datasheet for the 910B
(the 910B1 to 910B4 differ): every 910B takes the figures commonly quoted for the family (``Ascend910B3``
reads as ``ascend 910b3 910b``), and the source says so; a share above 100% then flags the entry
(``flops.OVER_PEAK_NOTE``). The cube units of the 910 and 910B run fp16/bf16 and int8; their fp32 rate is
not published, so fp32 work on them has no peak.

CPUs: no table. ``cpu_peak`` estimates cores x frequency x FLOPs per cycle per core, and the FLOPs per cycle
come from the instruction sets the collector found (the manifest's ``cpu_flags``, from /proc/cpuinfo):
``CPU_ISA_FLOPS`` lists, per instruction set, its vector lanes and the FLOPs one instruction does per lane,
taken times ``CPU_VECTOR_UNITS`` (2 FMA units per core, the count of current server cores; a CPU with one
unit reaches half the estimate). The widest set the CPU has for a precision wins: AVX-512 gives 2 x 16 fp32
lanes x 2 (FMA) = 64 fp32 FLOP/cycle, AVX2 with FMA 32, AMX's tile unit 1024 bf16 FLOP/cycle (2048 int8
OP/cycle), AVX-512 VNNI 2 x 64 int8 lanes x 2 = 256 int8 OP/cycle. The frequency is the maximum (turbo) the
system gives; where it gives only the current clock (as many VMs do), the estimate says so, since the CPU
may boost beyond it. A run recorded before the collector kept the flags is assumed to have AVX2 with FMA,
and the source says that too. The estimate is meant as an upper bound: a share of it above 100% means it is
wrong, which the FLOPs tables say (``flops.OVER_PEAK_NOTE``). Without the core count and the frequency the
peak is unknown; a CPU's memory bandwidth is not estimated (``device_bandwidth`` is unknown unless given).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9

#: the precisions a peak is given for, widest first
PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")

#: a precision without units of its own on a device runs at this precision's rate (``device_peak``)
RUNS_AS = {"tf32": "fp32", "fp16": "fp32", "bf16": "fp32"}


@dataclass(frozen=True)
class Peaks:
    """A device's dense peak FLOP/s per precision (None: no units for it), its memory bandwidth in bytes/s,
    and where the figures come from."""
    flops: dict[str, float | None]
    bandwidth: float | None
    source: str


def _peaks(source: str, bandwidth: float | None, *, fp64=None, fp32=None, tf32=None, fp16=None, bf16=None,
           fp8=None, int8=None) -> Peaks:
    """A table entry, the throughputs in TFLOP/s (TOP/s for int8)."""
    given = {"fp64": fp64, "fp32": fp32, "tf32": tf32, "fp16": fp16, "bf16": bf16, "fp8": fp8, "int8": int8}
    return Peaks({p: None if v is None else v * TERA for p, v in given.items()}, bandwidth, source)


_H100_SXM = dict(fp64=67, fp32=67, tf32=494.7, fp16=989.4, bf16=989.4, fp8=1978.9, int8=1978.9)
_A100 = dict(fp64=19.5, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624)
_A100_SOURCE = "NVIDIA A100 Tensor Core GPU datasheet (2021), dense"
_MI250_GCD = dict(fp64=45.3, fp32=45.3, fp16=181, bf16=181, int8=181)
_ASCEND_910 = _peaks("Huawei Ascend 910 launch (2019): 256 TFLOPS fp16, 512 TOPS int8; HBM2 1.2 TB/s (Hot Chips 31)",
                     1.2 * TERA, fp16=256, int8=512)
_ASCEND_910B = _peaks("Ascend 910B: no public per-SKU datasheet; the figures commonly quoted for the family (about "
                      "320 TFLOPS fp16/bf16, 640 TOPS int8, HBM2e 1.6 TB/s); the 910B3/B4 are lower",
                      1.6 * TERA, fp16=320, bf16=320, int8=640)

#: (tokens that must all appear in the device name, its peaks); variants before their family
DEVICE_PEAKS: list[tuple[tuple[str, ...], Peaks]] = [
    (("h100", "pcie"), _peaks("NVIDIA H100 Tensor Core GPU datasheet (PCIe), dense", 2.0 * TERA,
                              fp64=51.2, fp32=51.2, tf32=378, fp16=756, bf16=756, fp8=1513, int8=1513)),
    (("h100", "nvl"), _peaks("NVIDIA H100 Tensor Core GPU datasheet (NVL), dense", 3.9 * TERA,
                             fp64=60, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5, int8=1670.5)),
    (("h100",), _peaks("NVIDIA H100 Tensor Core GPU datasheet (SXM5), dense", 3.35 * TERA, **_H100_SXM)),
    (("h200",), _peaks("NVIDIA H200 Tensor Core GPU datasheet (SXM), dense", 4.8 * TERA, **_H100_SXM)),
    (("a100", "pcie", "80gb"), _peaks(_A100_SOURCE + "; 80GB PCIe", 1.935 * TERA, **_A100)),
    (("a100", "80gb"), _peaks(_A100_SOURCE + "; 80GB SXM4", 2.039 * TERA, **_A100)),
    (("a100",), _peaks(_A100_SOURCE + "; 40GB", 1.555 * TERA, **_A100)),
    (("a30",), _peaks("NVIDIA A30 datasheet, dense", 933 * GIGA, fp64=10.3, fp32=10.3, tf32=82, fp16=165, bf16=165,
                      int8=330)),
    (("a10",), _peaks("NVIDIA A10 datasheet, dense", 600 * GIGA, fp32=31.2, tf32=62.5, fp16=125, bf16=125, int8=250)),
    (("l40s",), _peaks("NVIDIA L40S datasheet, dense", 864 * GIGA, fp32=91.6, tf32=183, fp16=362, bf16=362, fp8=733,
                       int8=733)),
    (("l4",), _peaks("NVIDIA L4 datasheet, dense", 300 * GIGA, fp32=30.3, tf32=60, fp16=121, bf16=121, fp8=242.5,
                     int8=242.5)),
    (("v100s",), _peaks("NVIDIA V100S datasheet (PCIe)", 1134 * GIGA, fp64=8.2, fp32=16.4, fp16=130)),
    (("v100", "pcie"), _peaks("NVIDIA V100 datasheet (PCIe)", 900 * GIGA, fp64=7, fp32=14, fp16=112)),
    (("v100",), _peaks("NVIDIA V100 datasheet (SXM2)", 900 * GIGA, fp64=7.8, fp32=15.7, fp16=125)),
    (("t4",), _peaks("NVIDIA T4 datasheet", 320 * GIGA, fp32=8.1, fp16=65, int8=130)),
    (("gp100",), _peaks("NVIDIA Quadro GP100 datasheet (fp16: packed, no tensor cores)", 717 * GIGA,
                        fp64=5.2, fp32=10.3, fp16=20.7)),
    (("rtx", "3090"), _peaks("NVIDIA Ampere GA102 whitepaper (RTX 3090; fp16/bf16 at FP32 accumulate)", 936 * GIGA,
                             fp32=35.6, tf32=35.6, fp16=71, bf16=71, int8=284)),
    (("rtx", "4090"), _peaks("NVIDIA Ada Lovelace whitepaper (RTX 4090; FP32 accumulate)", 1008 * GIGA,
                             fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3, int8=660.6)),
    (("mi300x",), _peaks("AMD Instinct MI300X datasheet, dense (fp64/fp32: matrix)", 5.3 * TERA,
                         fp64=163.4, fp32=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4, fp8=2614.9, int8=2614.9)),
    (("mi250x",), _peaks("AMD Instinct MI250X datasheet, per GCD (half the OAM's figures; fp64/fp32: matrix)",
                         1.6384 * TERA, fp64=47.9, fp32=47.9, fp16=191.5, bf16=191.5, int8=191.5)),
    (("mi250",), _peaks("AMD Instinct MI250 datasheet, per GCD (half the OAM's figures; fp64/fp32: matrix)",
                        1.6384 * TERA, **_MI250_GCD)),
    (("mi210",), _peaks("AMD Instinct MI210 datasheet (fp64/fp32: matrix)", 1.6384 * TERA, **_MI250_GCD)),
    (("mi100",), _peaks("AMD Instinct MI100 datasheet (fp32: matrix)", 1.2288 * TERA, fp64=11.5, fp32=46.1,
                        fp16=184.6, bf16=92.3, int8=184.6)),
    (("ascend", "910b"), _ASCEND_910B),
    (("ascend", "910a"), _ASCEND_910),
    (("ascend", "910proa"), _ASCEND_910),
    (("ascend", "910premiuma"), _ASCEND_910),
    (("ascend", "910"), _ASCEND_910),
    (("ascend", "310p"), _peaks("Huawei Atlas 300I Pro (Ascend 310P) datasheet: 70 TFLOPS fp16, 140 TOPS int8, "
                                "LPDDR4X 204.8 GB/s", 204.8 * GIGA, fp16=70, int8=140)),
]

#: (computeMajor, computeMinor, numSms) of an AMD GPU ROCm names generically -> the DEVICE_PEAKS name it is
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
    ("AMX-INT8", ("amx_tile", "amx_int8"), {"int8": (1024, 2)}),     # one tile unit: 2048 int8 OP/cycle
    ("AVX-512 FP16", ("avx512_fp16",), {"fp16": (32, 2)}),
    ("AVX-512 BF16", ("avx512_bf16",), {"bf16": (32, 2)}),           # vdpbf16ps: 2 products and their sum
    ("AVX-512 VNNI", ("avx512_vnni",), {"int8": (64, 2)}),           # vpdpbusd: 4 int8 products per 32-bit lane
    ("AVX-VNNI", ("avx_vnni",), {"int8": (32, 2)}),
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
    """The name's lower-case words; an Ascend chip name also gives its family (``Ascend910B3``: ``ascend``,
    ``910b3`` and ``910b``)."""
    words = set(re.split(r"[^a-z0-9]+", re.sub(r"\bascend(?=\d)", "ascend ", name.lower())))
    if "ascend" in words:
        words |= {re.sub(r"(?<=[a-z])\d+$", "", word) for word in words}
    return words


def table_peaks(name: str) -> Peaks | None:
    """The ``DEVICE_PEAKS`` entry of the device called ``name``, None when it has none."""
    words = _tokens(name)
    return next((peaks for tokens, peaks in DEVICE_PEAKS if set(tokens) <= words), None)


def gpu_peak(name: str, precision: str = "fp32") -> float | None:
    """The dense peak FLOP/s of the accelerator called ``name`` at ``precision`` as its table entry has it
    (no ``RUNS_AS`` stand-in), None when unknown."""
    peaks = table_peaks(name)
    return peaks.flops.get(precision) if peaks else None


def cpu_flops_per_cycle(flags: list[str] | None, precision: str = "fp32") -> tuple[int, str] | None:
    """(FLOPs per cycle per core, how: ``AVX-512: 2 FMA units x 16 fp32 lanes x 2``) of the widest instruction
    set in ``CPU_ISA_FLOPS`` whose flags are all in ``flags`` and that does ``precision``; ``flags`` None
    (not recorded) assumes ``CPU_ISA_ASSUMED``. None when no set does the precision."""
    for isa, needed, rates in CPU_ISA_FLOPS:
        have = set(needed) <= set(flags) if flags is not None else isa in (CPU_ISA_ASSUMED, "SSE2")
        if have and precision in rates:
            lanes, per_lane = rates[precision]
            tile = isa.startswith("AMX")
            units = 1 if tile else CPU_VECTOR_UNITS
            how = f"{units} {'tile unit' if tile else 'FMA units'} x {lanes} {precision} lanes x {per_lane}"
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
    if table_peaks(name) is None and name.lower().startswith("amd"):
        key = (device.get("computeMajor"), device.get("computeMinor"), device.get("numSms"))
        return AMD_BY_COMPUTE_UNITS.get(key, name)
    return name


def _accelerator(meta: dict[str, str]) -> tuple[str, Peaks | None] | None:
    """(name, table entry or None) of the run's first GPU/NPU of ``device_properties``; None without any."""
    devices = [d for d in device_properties(meta) if d.get("name")]
    if not devices:
        return None
    name = _known_name(devices[0])
    return name, table_peaks(name)


def _cpu_freq_hz(device: dict) -> tuple[float, str] | None:
    """(the CPU's frequency in Hz, what it is): its maximum, else the current clock."""
    for key, scale, what in (("max_freq_hz", 1.0, "max"), ("freq_hz", 1.0, "current clock, may boost beyond"),
                             ("max_freq_mhz", 1e6, "max"), ("freq_mhz", 1e6, "current clock, may boost beyond")):
        if device.get(key):
            return float(device[key]) * scale, what
    return None


def _ran_as(precision: str, used: str) -> str:
    return "" if used == precision else f"; no {precision} units: {used}'s rate"


def device_peak(meta: dict[str, str], precision: str = "fp32",
                peak_flops: float | None = None) -> tuple[float | None, str]:
    """(peak FLOP/s, where it came from) at ``precision`` for a run's meta dict.

    Sources, first that applies: ``argument`` (``peak_flops`` given); ``table:<device name> <precision>
    (<the entry's source>)`` (the first GPU/NPU of ``device_properties`` found in ``DEVICE_PEAKS``; a
    precision it has no units for takes its ``RUNS_AS`` precision's peak, and the source ends ``; no
    <precision> units: <other>'s rate``); ``estimate:cpu <cores> cores x <GHz> GHz (max | current clock ...)
    x <n> FLOP/cycle (<instruction set>: <units> x <lanes> x <FLOPs per lane>)`` (a perfsight run on a CPU
    whose manifest gives cores and frequency; ``RUNS_AS`` likewise); else ``unknown`` (peak None), e.g. a
    GPU missing from the table, a precision the device cannot run, a CPU of unknown frequency.
    """
    if peak_flops is not None:
        return float(peak_flops), "argument"
    tried = [precision] + ([RUNS_AS[precision]] if precision in RUNS_AS else [])
    accelerator = _accelerator(meta)
    if accelerator is not None:
        name, peaks = accelerator
        for used in tried:
            if peaks is not None and peaks.flops.get(used):
                return peaks.flops[used], f"table:{name} {precision} ({peaks.source}{_ran_as(precision, used)})"
        return None, "unknown"
    device = _manifest_device(meta)
    if device.get("device", "cpu") == "cpu":
        cores = device.get("physical_cores") or device.get("logical_cores")
        freq, what = _cpu_freq_hz(device) or (None, "")
        flags = device.get("cpu_flags")
        for used in tried:
            estimate = cpu_peak(cores, freq, flags if isinstance(flags, list) else None, used)
            if estimate and freq:      # (an estimate has a frequency)
                return estimate[0], (f"estimate:cpu {cores} cores x {freq / 1e9:g} GHz ({what}) x {estimate[1]}"
                                     f"{_ran_as(precision, used)}")
    return None, "unknown"


def _manifest_device(meta: dict[str, str]) -> dict:
    """The ``device`` object of a perfsight run's manifest (meta ``manifest``); {} without one."""
    try:
        device = (json.loads(meta.get("manifest") or "{}") or {}).get("device") or {}
    except (ValueError, AttributeError):
        return {}
    return device if isinstance(device, dict) else {}


def device_bandwidth(meta: dict[str, str], bandwidth: float | None = None) -> tuple[float | None, str]:
    """(peak memory bandwidth in bytes/s, where it came from): ``argument`` (``bandwidth`` given),
    ``table:<device name> (<the entry's source>)``, else ``unknown`` (a CPU's is not estimated)."""
    if bandwidth is not None:
        return float(bandwidth), "argument"
    name, peaks = _accelerator(meta) or ("", None)
    if peaks is not None and peaks.bandwidth:
        return peaks.bandwidth, f"table:{name} ({peaks.source})"
    return None, "unknown"
