"""Generator of large multi-rank jobs made from the real shared traces, with planted answers: the jobs tests
and benchmarks of cluster analysis run on, knowing what must be found.

    python bench/jobgen.py --kind gpu|npu --ranks N --out DIR [--seed S] [--ranks-per-node 8]
                           [--slow-ranks K | --slow-rank R ...] [--slow-delay-us D] [--slow-link SRC,DST]
                           [--slow-link-factor F] [--offsets on|off] [--steps K] [--lean] [--workers W]
                           [--shape standard|no_args|fused|custom_kernels|warmup|early_start]

``import jobgen`` (bench/ on sys.path) gives ``generate(kind, ranks, out, **options) -> dict`` (the answers).
Nothing is written outside DIR; the shared data (``--data``, default ../shared/data) is only read.

**Layout** (both kinds): N ranks, ``ranks_per_node`` per node (node = rank // ranks_per_node, local index =
rank % ranks_per_node; ranks of one node share one clock). Groups: ``world`` (every rank, PyTorch's
default group "0"), one ``tp`` group per node (its ranks), one ``dp`` group per local index (the ranks of
that index on every node), and (gpu) one 2-rank ``p2p`` group per pipeline pair (src = r, dst = r +
ranks_per_node: the same local index on the next node). A layer whose groups would hold one rank (one node,
or one rank per node) is not made; its collectives go to ``world``.

**gpu** (``rank{R}.pt.trace.json``, uncompressed Kineto JSON, from kineto/hta/nccl_parser_config/
nccl_data.json.gz: rank 0 of a 2-rank DDP job, ProfilerStep#4-#6, 7 NCCL collectives per step). Each step's
collectives go, in order, to the layers ``GPU_LAYERS`` (two TP broadcasts, TP/DP all-reduces, the last
all-reduce over ``world``). Kernel args as PyTorch writes them: ``Process Group Name`` (distinct per group),
``Process Group Description``, ``Group size``, ``Process Group Ranks`` (cut past 30 ranks: "[0, 1, ..., 29,
...]"), ``Global rank start`` / ``stride`` on record_param_comms only (as the base trace has them), send /
recv kernels with ``Dst Rank`` / ``Src Rank`` (global). Timing model, in integer ns: every rank runs the
base timeline warped by its own lag: at each step start all ranks' lag is equal; it ramps (compute
stretched) to ``lag(r, j)`` at the step's j-th collective (1-based), ``lag = j x slow_delay`` for a slow
rank (its compute before each collective is longer) plus a seeded jitter in [0, ``jitter_ns``); a rank's
collective kernel starts at its own arrival (or when its previous NCCL kernel ends) and every member's
kernel ends at the group's last start + the transit time (bytes / ``COLLECTIVE_GBPS``, at least
``MIN_TRANSIT_NS``): waiting ranks start early and end with the others, the slow rank starts last and is
short; true ends are equal. The step's last (world) collective re-synchronises every rank. Send / recv
pairs (``P2P_PER_STEP`` per pipeline pair and step, ``P2P_BYTES`` each, in the forward gap, alternating
by node parity so no rank sends and receives at once) take bytes / ``P2P_GBPS``, the slow link that
times ``slow_link_factor``. ``--lean`` keeps only the device events, ProfilerSteps and record_param_comms
(about 0.7 MB per rank and step instead of 2.9 MB).

**gpu shapes** (``--shape``), the real jobs' shapes the standard one does not have:

* ``no_args``: as an older PyTorch writes it: no collective metadata on the NCCL kernels, send/recv kernels or
  record_param_comms, no ``pg_config`` in distributedInfo; the collectives are known only from the host
  ``nccl:*`` ranges that launch the kernels (needs the host events: not with ``--lean``).
* ``fused``: every rank's events in one file ``job.pt.trace.json``, each event's ``args.rank`` its rank and its
  pid rank x 100,000,000 + its own (a merged multi-rank trace).
* ``custom_kernels``: communication in DeepEP-style kernels, not NCCL's: the collectives' kernels and their
  ranges renamed (``CUSTOM_NAMES``), without collective metadata; no collective can be matched across ranks,
  the kernels are the ranks' communication.
* ``warmup``: every rank's first step ``WARMUP_NS`` longer (its work before its first collective stretched), as
  a first step that compiles and allocates is; ``mean_step_ns`` includes it.
* ``early_start``: the ranks that wait open each ProfilerStep ``EARLY_START_NS`` before the slow ranks do (the
  slow ranks' step slices begin that much later, their ends and every other event unchanged), as on a real
  8-rank job whose step ends agreed within 0.92 ms: by mean step span every waiting rank is the slower one;
  step end to step end the ranks are as even as in the standard job.

**npu** (``rank{R}_ascend_pt/``, torch_npu text export, from ascend/torch_npu/text/level1/rank0_ascend_pt:
step 50, 4 HCCL all-reduces). The ops go to the layers ``NPU_LAYERS``. Per rank: profiler_info_{R}.json
(``rank_id``), profiler_metadata.json (``distributed_args``, ``parallel_group_info``: one communicator per
group, ``group_rank``, ``global_ranks``), every timestamp of every file shifted by the node's clock offset,
the HCCL ops renamed per group (``hcom_allReduce__{hash[-3:]}_{i}_1``). Waits: a rank's op starts at the
base start + its arrival delay (jitter in [0, ``jitter_ns``), capped at a quarter of the op's slack; the
slow rank: ``slow_delay`` capped at 90% of the slack), every member ends at the base end; communication.json
reports wait = the group's last start - own start (the slow rank ~0, the others its delay), transit as
the base's, idle = elapse - transit - wait; trace_view.json and kernel_details.csv hold the same starts
and durations (HCCL plane tasks before a later start are clipped to it); step_trace_time.csv moves the
rank's total delay from communication to free. communication_matrix.json: per group, keys top1 / middle
/ bottom1-3 / total, links from the rank to itself (LOCAL), to every TP member (HCCS, full mesh), to its
DP and world ring neighbours (RDMA across nodes, HCCS within), each link's time = its size / the
transport's bandwidth (``LINK_GBPS``), the slow link's (a DP ring link src -> src + ranks_per_node) times
``slow_link_factor``; the src rank's RDMA bandwidth in communication.json is that slower too.

**answers.json**:

* ``kind``, ``world_size``, ``ranks_per_node``, ``nodes``, ``seed``, ``steps`` (step numbers kept),
  ``lean`` (gpu), ``paths`` (rank -> its file or folder, relative to DIR);
* ``groups``: process-group name (gpu: ``Process Group Name``; npu: the communicator's hash as
  communication.json names the group) -> ``{"layer": world|tp|dp|p2p, "ranks": [global ranks], "description":
  the framework's name (PyTorch's ``Process Group Description``, parallel_group_info's ``group_name``),
  "communicator": (npu) HCCL's communicator name}``;
* ``slow_ranks``: the planted slow ranks (least wait in every group they are in, the others wait for them);
  ``slow_delay_ns``: their extra lateness per collective (gpu: j x this at the step's j-th collective; npu:
  per op, capped by its slack);
* ``slow_link``: ``{"src", "dst", "transport", "bandwidth_gbps", "others_gbps", "factor"}`` (null with one
  node): the link's bandwidth and the other links' of its transport (gpu: the send/recv pairs';
  ``collective_gbps``: every collective's bytes / transit); the slow one is ``factor`` times slower;
* ``clock_offsets_ns``: per rank (list index = rank), its clock minus rank 0's (every timestamp of the rank
  is true time + this; ranks of a node share it); true collective ends are equal across members, so an
  estimate from collective ends is exact; ``jitter_ns``: the bound of the arrival jitter (a wait or skew
  between non-slow ranks stays under it; no wait figure is exact beyond it);
* ``mean_step_ns``: per rank, the mean duration of its ProfilerStep slices (what ``mean_step_by_rank``
  measures), exact;
* ``collective_gbps`` (gpu), ``queued_kernels`` (gpu: NCCL kernels that started after their arrival
  because the rank's previous NCCL kernel was still running; 0 with the defaults);
* ``shape`` (gpu): the ``--shape`` written;
* ``seconds``: the generation's wall time.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import multiprocessing
import re
import sys
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
GPU_BASE = Path("kineto/hta/nccl_parser_config/nccl_data.json.gz")
NPU_BASE = Path("ascend/torch_npu/text/level1/rank0_ascend_pt")

#: the layer of each NCCL collective of a gpu step, in order (the base step: broadcast x2, all-reduce x5)
GPU_LAYERS = ("tp", "tp", "tp", "dp", "tp", "dp", "world")
#: the layer of each HCCL op of an npu step, in order (the base step: 4 all-reduces)
NPU_LAYERS = ("tp", "dp", "tp", "world")
DESCRIPTIONS = {"world": "default_pg", "tp": "TENSOR_MODEL_PARALLEL_GROUP", "dp": "DATA_PARALLEL_GROUP",
                "p2p": "PIPELINE_MODEL_PARALLEL_GROUP"}
#: PyTorch lists a group's ranks up to this many, then ", ..." (torch/csrc/profiler/util.cpp kTruncatLength)
RANKS_SHOWN = 30
COLLECTIVE_GBPS = 10.0
MIN_TRANSIT_NS = 5_000
P2P_GBPS = 10.0
P2P_BYTES = 16_000_000
P2P_PER_STEP = 4            # slots per step in the forward gap, alternating node parity: 2 sends per pair
JITTER_NS = 50_000
SLOW_DELAY_NS = 500_000
SLOW_LINK_FACTOR = 5.0
OFFSET_RANGE_NS = 20_000_000
#: npu link bandwidth per transport (GB/s = MB/ms)
LINK_GBPS = {"HCCS": 18.0, "RDMA": 12.0, "LOCAL": 400.0}
NS_PER_US = 1000
SHAPES = ("standard", "no_args", "fused", "custom_kernels", "warmup", "early_start")
#: shape warmup: every rank's first step is this much longer (a first step's compilation, allocation, caching)
WARMUP_NS = 600_000_000
#: shape early_start: how much earlier the waiting ranks open each step than the slow ranks (the real job's 7.5 ms)
EARLY_START_NS = 7_500_000
BARE_SHAPES = ("no_args", "custom_kernels")        # without collective metadata
#: the collective metadata PyTorch >= 2.1 writes on NCCL kernels and record_param_comms (shapes without it)
COLLECTIVE_ARGS = ("Collective name", "dtype", "In msg nelems", "Out msg nelems", "Group size", "Process Group Name",
                   "Process Group Description", "Process Group Ranks", "Global rank start", "Global rank stride",
                   "In split size", "Out split size", "Src Rank", "Dst Rank")
#: shape custom_kernels: each NCCL kernel family's and host range's name -> a DeepEP-style one
CUSTOM_NAMES = {"ncclKernel_AllReduce": "void deep_ep::internode::combine<8, 768>(int4*, float*, int const*)",
                "ncclKernel_Broadcast": "void deep_ep::intranode::dispatch<8, 768>(int4*, float*, int const*)",
                "ncclKernel_SendRecv": "void deep_ep::intranode::notify_dispatch(int const*, int*, int)",
                "nccl:all_reduce": "deep_ep::Buffer::combine", "nccl:broadcast": "deep_ep::Buffer::dispatch"}
_CUSTOM_NAME = re.compile(r'"name": "(' + "|".join(re.escape(k) for k in CUSTOM_NAMES) + r')[^"]*"')
#: shape fused: the one file, and a rank's pids prefixed with rank x this (as merged multi-rank traces write them)
FUSED_FILE = "job.pt.trace.json"
FUSED_PID_STRIDE = 100_000_000


# --- layout and plants ---------------------------------------------------------------------------------


@dataclass
class Group:
    name: str
    layer: str
    ranks: list[int]
    communicator: str | None = None

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self.layer]


@dataclass
class Job:
    """The layout, groups and planted answers shared by both kinds."""

    kind: str
    world: int
    per_node: int
    seed: int
    slow_ranks: list[int]
    slow_delay_ns: int
    slow_link: tuple[int, int] | None
    slow_link_factor: float
    offsets: np.ndarray                      # per rank, ns
    jitter_ns: int = JITTER_NS
    groups: dict[str, Group] = field(default_factory=dict)
    member: dict[str, np.ndarray] = field(default_factory=dict)   # layer -> group index of each rank
    layer_groups: dict[str, list[Group]] = field(default_factory=dict)

    @property
    def nodes(self) -> int:
        return self.world // self.per_node

    def layer_of(self, layer: str) -> str:
        """The layer that runs ``layer``'s collectives: itself, or world when its groups would be of one rank."""
        size = {"tp": self.per_node, "dp": self.nodes}.get(layer, self.world)
        return layer if size > 1 else "world"

    def group_of(self, layer: str, rank: int) -> Group:
        layer = self.layer_of(layer)
        return self.layer_groups[layer][int(self.member[layer][rank])]

    def pairs(self) -> list[tuple[int, int]]:
        """The pipeline pairs (src, dst): each rank to the same local index on the next node."""
        return [(r, r + self.per_node) for r in range(self.world - self.per_node)]


def _layout(job: Job, name_of) -> None:
    """The groups of ``job`` (module docstring), named by ``name_of(layer, index)``."""
    world, per_node = job.world, job.per_node
    layers = {"world": [list(range(world))]}
    if per_node > 1:
        layers["tp"] = [list(range(n * per_node, (n + 1) * per_node)) for n in range(job.nodes)]
    if job.nodes > 1:
        layers["dp"] = [list(range(i, world, per_node)) for i in range(per_node)]
    if job.kind == "gpu":
        layers["p2p"] = [list(pair) for pair in job.pairs()]
    index = 0
    for layer, members in layers.items():
        groups = []
        for i, ranks in enumerate(members):
            group = Group(name_of(layer, i, index), layer, ranks)
            groups.append(group)
            job.groups[group.name] = group
            index += 1
        job.layer_groups[layer] = groups
        if layer != "p2p":
            which = np.zeros(world, np.int64)
            for i, ranks in enumerate(members):
                which[ranks] = i
            job.member[layer] = which


def _plants(kind: str, world: int, per_node: int, seed: int, slow_count: int, slow_ranks: list[int] | None,
            slow_delay_ns: int, slow_link: tuple[int, int] | None, slow_link_factor: float, offsets: bool) -> Job:
    """The job's layout with its plants: given, or chosen by ``seed``."""
    if world < 2 or per_node < 1 or world % per_node:
        raise SystemExit(f"--ranks {world} must be at least 2 and a multiple of --ranks-per-node {per_node}")
    rng = np.random.default_rng(seed)
    nodes = world // per_node
    node_offsets = rng.integers(-OFFSET_RANGE_NS, OFFSET_RANGE_NS, nodes) if offsets else np.zeros(nodes, np.int64)
    node_offsets[0] = 0
    job = Job(kind, world, per_node, seed, [], slow_delay_ns, None, slow_link_factor,
              np.repeat(node_offsets.astype(np.int64), per_node))
    if slow_ranks is None:
        # distinct nodes and local indices (no two slow ranks share a group but world), chosen by seed
        count = min(slow_count, nodes, per_node)
        chosen = zip(rng.permutation(nodes)[:count], rng.permutation(per_node)[:count])
        slow_ranks = [int(node * per_node + local) for node, local in chosen]
    if any(not 0 <= r < world for r in slow_ranks):
        raise SystemExit(f"--slow-rank {slow_ranks}: ranks are 0..{world - 1}")
    job.slow_ranks = sorted(set(slow_ranks))
    pairs = job.pairs()
    if slow_link is None and pairs:
        slow_link = pairs[int(rng.integers(len(pairs)))]
    if slow_link is not None and slow_link not in pairs:
        raise SystemExit(f"--slow-link {slow_link}: a link is (r, r + ranks_per_node) for r < "
                         f"{world - per_node} (the pipeline pairs and DP ring links)")
    job.slow_link = slow_link
    return job


def _us(ns: int) -> str:
    """Integer ns as microseconds with 3 decimals (Kineto's and torch_npu's timestamp text)."""
    return f"-{_us(-ns)}" if ns < 0 else f"{ns // NS_PER_US}.{ns % NS_PER_US:03d}"


def _ns(value) -> int:
    """A JSON number of microseconds (a float as the decimal it prints as, or a numeric string) as ns."""
    text = value if isinstance(value, str) else repr(value)
    return int((Decimal(text.strip()) * NS_PER_US).to_integral_value())


def _ranks_text(ranks: list[int]) -> str:
    """``Process Group Ranks`` as PyTorch writes it (cut past RANKS_SHOWN)."""
    if len(ranks) > RANKS_SHOWN:
        return f"[{', '.join(map(str, ranks[:RANKS_SHOWN]))}, ...]"
    return f"[{', '.join(map(str, ranks))}]"


# --- templates -------------------------------------------------------------------------------------------

_SLOT = re.compile(r'"\\u0000(\w+)\\u0000"')


class Template:
    """Events serialised once with numbered slots for what changes per rank: ``ts`` / ``dur`` (numbers or
    strings), or a whole ``event``; ``render(values)`` fills the slots in order."""

    def __init__(self):
        self.parts: list[str] = []
        self.slots: list[tuple[str, int]] = []          # (kind, event index)
        self._pending = ""

    def add(self, text: str, index: int) -> None:
        pieces = _SLOT.split(text)
        self._pending += pieces[0]
        for kind, static in zip(pieces[1::2], pieces[2::2]):
            self.parts.append(self._pending)
            self.slots.append((kind, index))
            self._pending = static

    def add_slot(self, kind: str, index: int) -> None:
        self.parts.append(self._pending)
        self.slots.append((kind, index))
        self._pending = ""

    def add_text(self, text: str) -> None:
        self._pending += text

    def render(self, values: list[str]) -> str:
        out = [""] * (2 * len(self.parts) + 1)
        out[0:-1:2] = self.parts
        out[1::2] = values
        out[-1] = self._pending
        return "".join(out)


def _with_times(event: dict, ts_ns: int, dur_ns: int) -> str:
    """``event`` as JSON with ``ts`` and ``dur`` the given ns as microsecond numbers."""
    text = _slotted(event)
    return text.replace('"\\u0000ts\\u0000"', _us(ts_ns)).replace('"\\u0000dur\\u0000"', _us(dur_ns))


def _slotted(event: dict, keys=("ts", "dur")) -> str:
    """``event`` as JSON with ``keys`` it has turned into slots."""
    return json.dumps({k: (f"\0{k}\0" if k in keys else v) for k, v in event.items()})


# --- gpu -------------------------------------------------------------------------------------------------


def _is_nccl(event: dict) -> bool:
    return event.get("cat") == "kernel" and "Collective name" in event.get("args", {})


def _is_param_comms(event: dict) -> bool:
    args = event.get("args", {})
    return event.get("name") == "record_param_comms" and args.get("Collective name") not in (None, "wait")


_LEAN_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "user_annotation", "Trace", None}


class GpuBase:
    """The base trace parsed once: its events (kept steps), their base ns, the collectives and the template."""

    def __init__(self, data: Path, steps: int | None, lean: bool, bare: bool = False):
        """``bare``: the template's events without collective metadata (the shapes without it)."""
        document = json.loads(gzip.decompress((data / GPU_BASE).read_bytes()))
        events = document["traceEvents"]
        step_events = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
                             key=lambda e: e["ts"])
        if steps is not None and not 1 <= steps <= len(step_events):
            raise SystemExit(f"--steps {steps}: the base trace has {len(step_events)} steps")
        kept = step_events[:steps] if steps else step_events
        cut = _ns(step_events[len(kept)]["ts"]) if len(kept) < len(step_events) else None
        keep = []
        for e in events:
            if cut is not None and "ts" in e and e.get("ph") != "M" and _ns(e["ts"]) >= cut:
                continue
            if lean and e.get("ph") != "M" and e.get("cat") not in _LEAN_CATS and not _is_param_comms(e):
                continue
            keep.append(e)
        self.header = {k: v for k, v in document.items() if k != "traceEvents"}
        self.events = keep
        self.steps = [int(e["name"].split("#")[1]) for e in kept]
        self.step_starts = np.array([_ns(e["ts"]) for e in kept], np.int64)
        self.step_rows = [keep.index(e) for e in kept]
        self.ts = np.array([_ns(e["ts"]) if "ts" in e else 0 for e in keep], np.int64)
        self.end = self.ts + np.array([_ns(e["dur"]) if "dur" in e else 0 for e in keep], np.int64)
        nccl = sorted((i for i, e in enumerate(keep) if _is_nccl(e)), key=lambda i: self.ts[i])
        self.nccl_rows = nccl
        self.stream = keep[nccl[0]]["tid"]
        by_external = {keep[i]["args"].get("External id"): i for i in nccl}
        self.comms_rows = {i: by_external[e["args"].get("External id")] for i, e in enumerate(keep)
                           if _is_param_comms(e) and e["args"].get("External id") in by_external}
        # collectives per kept step, in order
        self.collectives: list[list[int]] = []
        bounds = list(self.step_starts) + [np.iinfo(np.int64).max]
        for n in range(len(kept)):
            rows = [i for i in nccl if bounds[n] <= self.ts[i] < bounds[n + 1]]
            if len(rows) != len(GPU_LAYERS):
                raise SystemExit(f"base step {self.steps[n]}: {len(rows)} NCCL kernels, expected {len(GPU_LAYERS)}")
            self.collectives.append(rows)
        # the GPU-side ranges around the NCCL kernels (``nccl:all_reduce`` on their stream) follow their kernel
        self.annotations = {}
        for i, e in enumerate(keep):
            if e.get("cat") == "gpu_user_annotation" and e.get("tid") == self.stream:
                kernel = next((k for k in nccl if self.ts[i] <= self.ts[k] < self.end[i]), None)
                if kernel is not None:
                    self.annotations[i] = kernel
        special = set(nccl) | set(self.comms_rows) | set(self.annotations)
        self.template = Template()
        for i, e in enumerate(keep):
            if i:
                self.template.add_text(",\n")
            if i in special:
                self.template.add_slot("event", i)
            else:
                self.template.add(_slotted({**e, "args": _without_collective_args(e["args"])} if bare and "args" in e
                                           else e), i)

    def message_bytes(self, row: int) -> int:
        args = self.events[row]["args"]
        size = {"Float": 4, "Long": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Byte": 1}.get(args.get("dtype"), 4)
        return max(int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0)) * size


def _transit_ns(size: int, gbps: float) -> int:
    return max(MIN_TRANSIT_NS, round(size / gbps))


class GpuJob:
    """The simulated timing of every rank (module docstring) and each rank's file."""

    def __init__(self, job: Job, base: GpuBase, shape: str = "standard"):
        self.job, self.base, self.shape = job, base, shape
        self.bare = shape in BARE_SHAPES
        world = job.world
        rng = np.random.default_rng(job.seed + 1)
        slow = np.zeros(world, np.int64)
        slow[job.slow_ranks] = 1
        n_steps, per_step = len(base.collectives), len(GPU_LAYERS)
        jitter = rng.integers(0, job.jitter_ns, (n_steps, per_step, world))
        lags = slow[None, None, :] * (np.arange(1, per_step + 1)[None, :, None] * job.slow_delay_ns) + jitter
        # knots: (time, lag per rank)
        knot_t: list[int] = []
        knot_l: list[np.ndarray] = []
        common = np.zeros(world, np.int64)
        self.kernels: dict[int, tuple[np.ndarray, np.ndarray]] = {}     # nccl row -> start, end per rank
        self.p2p: list[dict] = []
        self.queued = 0
        stream_free = np.full(world, np.iinfo(np.int64).min)
        for n, rows in enumerate(base.collectives):
            knot_t.append(int(base.step_starts[n]))
            knot_l.append(common.copy())
            if n == 0 and shape == "warmup":
                common = common + WARMUP_NS         # the first step's work before its first collective, longer
            step_knots = [(int(base.ts[row]), common + lags[n, j]) for j, row in enumerate(rows)]
            ops = [("collective", j, int(base.ts[row])) for j, row in enumerate(rows)]
            gap_start, gap_end = int(base.end[rows[1]]), int(base.ts[rows[2]])
            ops += [("p2p", s, gap_start + (s + 1) * (gap_end - gap_start) // (P2P_PER_STEP + 1))
                    for s in range(P2P_PER_STEP)]
            last = rows[-1]
            for what, j, at in sorted(ops, key=lambda op: op[2]):
                if what == "collective":
                    arrival = at + common + lags[n, j]
                    start = np.maximum(arrival, stream_free)
                    self.queued += int((start > arrival).sum())
                    layer = job.layer_of(GPU_LAYERS[j])
                    which = job.member[layer]
                    latest = np.full(len(job.layer_groups[layer]), np.iinfo(np.int64).min)
                    np.maximum.at(latest, which, start)
                    end = latest[which] + _transit_ns(base.message_bytes(rows[j]), COLLECTIVE_GBPS)
                    self.kernels[rows[j]] = (start, end)
                    stream_free = end
                else:
                    arrival = at + self._lag_at(at, knot_t + [k[0] for k in step_knots],
                                                knot_l + [k[1] for k in step_knots])
                    self._p2p_slot(n, j, arrival, stream_free)
            end_last = self.kernels[last][1]
            common = end_last - int(base.end[last])          # every rank's lag after the world collective
            knot_t += [k[0] for k in step_knots] + [int(base.end[last])]
            knot_l += [k[1] for k in step_knots] + [common.copy()]
        self.knot_t = np.array(knot_t, np.int64)
        self.knot_l = np.stack(knot_l, axis=1)                           # rank x knot
        position = np.searchsorted(self.knot_t, base.ts, side="right") - 1
        self.position = np.clip(position, 0, len(knot_t) - 2)
        self.before = position < 0
        self.after = position >= len(knot_t) - 1
        end_position = np.searchsorted(self.knot_t, base.end, side="right") - 1
        self.end_position = np.clip(end_position, 0, len(knot_t) - 2)
        self.end_before, self.end_after = end_position < 0, end_position >= len(knot_t) - 1

    @staticmethod
    def _lag_at(at: int, times: list[int], lags: list[np.ndarray]) -> np.ndarray:
        order = np.argsort(times, kind="stable")
        times_sorted = [times[i] for i in order]
        i = int(np.searchsorted(times_sorted, at, side="right")) - 1
        if i < 0:
            return lags[order[0]]
        if i >= len(times) - 1:
            return lags[order[-1]]
        t0, t1 = times_sorted[i], times_sorted[i + 1]
        l0, l1 = lags[order[i]], lags[order[i + 1]]
        return l0 + (at - t0) * (l1 - l0) // (t1 - t0)

    def _p2p_slot(self, step: int, slot: int, arrival: np.ndarray, stream_free: np.ndarray) -> None:
        job = self.job
        for src, dst in job.pairs():
            if (src // job.per_node) % 2 != slot % 2:
                continue
            slow = (src, dst) == job.slow_link
            transit = _transit_ns(P2P_BYTES, P2P_GBPS / (job.slow_link_factor if slow else 1.0))
            start_src, start_dst = (max(int(arrival[r]), int(stream_free[r])) for r in (src, dst))
            end = max(start_src, start_dst) + transit
            self.p2p.append({"step": step, "src": src, "dst": dst, "start": (start_src, start_dst), "end": end})

    def warped(self, rank: int, times: np.ndarray, position: np.ndarray, before: np.ndarray,
               after: np.ndarray) -> np.ndarray:
        lags = self.knot_l[rank]
        t0, t1 = self.knot_t[position], self.knot_t[position + 1]
        l0, l1 = lags[position], lags[position + 1]
        lag = l0 + (times - t0) * (l1 - l0) // (t1 - t0)
        lag = np.where(before, lags[0], np.where(after, lags[-1], lag))
        return times + lag

    def step_start_delay_ns(self, rank: int) -> int:
        """How much later the rank opens each ProfilerStep than the timing model places it (shape early_start:
        the slow ranks do, so the ranks that wait for them open their steps early)."""
        return EARLY_START_NS if self.shape == "early_start" and rank in self.job.slow_ranks else 0

    def mean_step_ns(self, rank: int) -> int:
        rows = self.base.step_rows
        start = self.warped(rank, self.base.ts[rows], self.position[rows], self.before[rows], self.after[rows])
        start += self.step_start_delay_ns(rank)
        end = self.warped(rank, self.base.end[rows], self.end_position[rows], self.end_before[rows],
                          self.end_after[rows])
        return round(int((end - start).sum()) / len(rows))

    # -- writing --

    def _args(self, rank: int, row: int, base_args: dict, layer: str, record: bool) -> dict:
        if self.bare:
            return _without_collective_args(base_args)
        group = self.job.group_of(layer, rank)
        args = dict(base_args)
        args.update({"Process Group Name": group.name, "Process Group Description": group.description,
                     "Group size": len(group.ranks), "Process Group Ranks": _ranks_text(group.ranks)})
        if record:
            stride = group.ranks[1] - group.ranks[0] if len(group.ranks) > 1 else 1
            args.update({"Global rank start": group.ranks[0], "Global rank stride": stride})
        return args

    def render(self, rank: int) -> str:
        base, job = self.base, self.job
        offset = int(job.offsets[rank])
        ts = self.warped(rank, base.ts, self.position, self.before, self.after)
        ts[base.step_rows] += self.step_start_delay_ns(rank)
        end = self.warped(rank, base.end, self.end_position, self.end_before, self.end_after)
        layer_of_row = {row: GPU_LAYERS[j] for rows in base.collectives for j, row in enumerate(rows)}
        values = []
        for kind, i in base.template.slots:
            if kind == "ts":
                values.append(_us(int(ts[i]) + offset))
            elif kind == "dur":
                values.append(_us(int(end[i] - ts[i])))
            elif i in base.annotations:
                kernel = base.annotations[i]
                start, stop = self.kernels[kernel]
                begin = int(start[rank]) - int(base.ts[kernel] - base.ts[i])
                finish = int(stop[rank]) + int(base.end[i] - base.end[kernel])
                values.append(_with_times(base.events[i], begin + offset, finish - begin))
            else:
                event = base.events[i]
                kernel = base.comms_rows.get(i, i)
                layer = layer_of_row[kernel]
                out = dict(event, args=self._args(rank, i, event["args"], layer, i in base.comms_rows))
                if i in self.kernels:
                    start, stop = self.kernels[i]
                    values.append(_with_times(out, int(start[rank]) + offset, int(stop[rank] - start[rank])))
                else:
                    values.append(_with_times(out, int(ts[i]) + offset, int(end[i] - ts[i])))
        body = base.template.render(values)
        extra = "".join(",\n" + self._p2p_event(rank, op, offset) for op in self.p2p if rank in (op["src"], op["dst"]))
        text = self._header(rank) + body + extra + self._footer()
        if self.shape == "custom_kernels":
            text = _CUSTOM_NAME.sub(lambda m: f'"name": {json.dumps(CUSTOM_NAMES[m.group(1)])}', text)
        return text

    def _p2p_event(self, rank: int, op: dict, offset: int) -> str:
        sending = rank == op["src"]
        peer = op["dst"] if sending else op["src"]
        group = next(g for g in self.job.layer_groups["p2p"] if g.ranks == [op["src"], op["dst"]])
        start = op["start"][0 if sending else 1]
        nelems = P2P_BYTES // 4
        args = {"External id": 0, "device": 0, "stream": self.base.stream, "Collective name":
                "send" if sending else "recv", "In msg nelems": nelems, "Out msg nelems": nelems, "Group size": 2,
                "dtype": "Float", "In split size": "[]", "Out split size": "[]", "Process Group Name": group.name,
                "Process Group Description": group.description, "Process Group Ranks": _ranks_text(group.ranks),
                ("Dst Rank" if sending else "Src Rank"): peer}
        if self.bare:
            args = _without_collective_args(args)
        event = {"ph": "X", "cat": "kernel", "name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, "
                 "unsigned long, ncclWork*)", "pid": 0, "tid": self.base.stream, "ts": 0, "dur": 0, "args": args}
        return _with_times(event, start + offset, op["end"] - start)

    def _header(self, rank: int) -> str:
        job, header = self.job, self.base.header
        mine = [g for g in job.groups.values() if rank in g.ranks]
        info = {"backend": "nccl", "rank": rank, "world_size": job.world, "pg_count": len(mine),
                "pg_config": [{"pg_name": g.name, "pg_desc": g.description, "backend_config": "cuda:nccl",
                               "pg_size": len(g.ranks), "ranks": g.ranks} for g in mine],
                "nccl_version": header.get("distributedInfo", {}).get("nccl_version", "2.17.1")}
        if self.bare:
            info = {k: v for k, v in info.items() if k not in ("pg_count", "pg_config")}
        head = {"schemaVersion": header.get("schemaVersion", 1), "deviceProperties": header.get("deviceProperties", []),
                "distributedInfo": info}
        return json.dumps(head)[:-1] + ', "traceEvents": [\n'

    def _footer(self) -> str:
        tail = {k: v for k, v in self.base.header.items()
                if k not in ("schemaVersion", "deviceProperties", "distributedInfo")}
        return "\n]" + "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in tail.items()) + "}\n"

    def answers(self) -> dict:
        job = self.job
        link = None
        if job.slow_link is not None:
            link = {"src": job.slow_link[0], "dst": job.slow_link[1], "transport": "UNKNOWN",
                    "bandwidth_gbps": P2P_BYTES / _transit_ns(P2P_BYTES, P2P_GBPS / job.slow_link_factor),
                    "others_gbps": P2P_BYTES / _transit_ns(P2P_BYTES, P2P_GBPS), "factor": job.slow_link_factor}
        paths = ({str(r): FUSED_FILE for r in range(job.world)} if self.shape == "fused"
                 else {str(r): f"rank{r}.pt.trace.json" for r in range(job.world)})
        return {"steps": self.base.steps, "slow_link": link, "collective_gbps": COLLECTIVE_GBPS,
                "queued_kernels": self.queued, "mean_step_ns": [self.mean_step_ns(r) for r in range(job.world)],
                "paths": paths, "shape": self.shape}



def _without_collective_args(args: dict) -> dict:
    return {k: v for k, v in args.items() if k not in COLLECTIVE_ARGS}


def _fuse(out: Path, ranks: int) -> None:
    """Shape fused: the ranks' files merged into ``FUSED_FILE`` (rank 0's header; each event's pid prefixed with
    its rank and its args given ``rank``), the rank files removed."""
    events, head = [], None
    for rank in range(ranks):
        path = out / f"rank{rank}.pt.trace.json"
        document = json.loads(path.read_text())
        head = head or {k: v for k, v in document.items() if k != "traceEvents"}
        for event in document["traceEvents"]:
            if isinstance(event.get("pid"), int):
                event["pid"] += rank * FUSED_PID_STRIDE
            if event.get("ph") != "M":
                event["args"] = {**event.get("args", {}), "rank": rank}
            events.append(event)
        path.unlink()
    (out / FUSED_FILE).write_text(json.dumps({**(head or {}), "traceEvents": events}))


def _gpu_name(layer: str, index: int, order: int) -> str:
    return str(order)                  # PyTorch names groups by creation order: "0" is the default group


# --- npu -------------------------------------------------------------------------------------------------

_HCCL_OP = re.compile(r"^hcom_(\w+?)__(\d+)_(\d+)_(\d+)$")
_TIMESTAMP = re.compile(r"\b(1\d{15})\.(\d{1,3})\d*")      # absolute microseconds of 2017..2286 with decimals
_TIME_INFO = "Communication Time Info"
_BANDWIDTH_INFO = "Communication Bandwidth Info"


class _Shifted:
    """A text file whose absolute microsecond timestamps move by a rank's offset (split once)."""

    def __init__(self, text: str):
        self.parts = _TIMESTAMP.split(text)     # static, seconds, decimals, static, ...

    def render(self, offset_ns: int) -> str:
        out = list(self.parts)
        for k in range(1, len(out), 3):
            ns = int(out[k]) * NS_PER_US + int(out[k + 1].ljust(3, "0"))
            out[k], out[k + 1] = _us(ns + offset_ns), ""
        return "".join(out)


@dataclass
class HcclOp:
    index: int                # position in the step
    name: str                 # base name
    start: int                # base start ns (trace)
    end: int                  # base end ns
    transit: int              # ns
    wait: int                 # base wait ns
    sync: int
    elapse: int
    bytes: int
    info: dict                # base communication.json entry
    layer: str = ""


class NpuBase:
    """The base rank folder parsed once."""

    def __init__(self, data: Path):
        folder = data / NPU_BASE
        output = folder / "ASCEND_PROFILER_OUTPUT"
        self.info = json.loads(next(folder.glob("profiler_info_*.json")).read_text())
        self.metadata = json.loads((folder / "profiler_metadata.json").read_text())
        trace = json.loads((output / "trace_view.json").read_text())
        communication = json.loads((output / "communication.json").read_text())
        (self.step_key, step), = communication.items()
        self.step = int(self.step_key.removeprefix("step"))
        ops = {k.split("@")[0]: v for k, v in step["collective"].items() if "@" in k}
        events = {e["name"]: e for e in trace if e.get("ph") == "X" and _HCCL_OP.match(str(e.get("name")))}
        self.ops: list[HcclOp] = []
        for name in sorted(ops, key=lambda n: int(_HCCL_OP.match(n).group(3))):
            info, event = ops[name], events[name]
            times = info[_TIME_INFO]
            start = _ns(event["ts"])
            self.ops.append(HcclOp(len(self.ops), name, start, start + round(event["dur"] * NS_PER_US),
                                   round(times["Transit Time(ms)"] * 1e6), round(times["Wait Time(ms)"] * 1e6),
                                   round(times["Synchronization Time(ms)"] * 1e6), round(event["dur"] * NS_PER_US),
                                   int(event["args"]["count"]) * 4, info))
        if len(self.ops) != len(NPU_LAYERS):
            raise SystemExit(f"{output}: {len(self.ops)} HCCL ops, expected {len(NPU_LAYERS)}")
        for op, layer in zip(self.ops, NPU_LAYERS):
            op.layer = layer
        hccl_pid = next(e["pid"] for e in trace if e.get("ph") == "M" and e.get("name") == "process_name"
                        and e["args"].get("name") == "HCCL")
        self.plane = {}             # trace row -> op index: the HCCL plane tasks and flow ends within an op
        self.op_rows = {}
        for i, e in enumerate(trace):
            if e.get("pid") != hccl_pid or "ts" not in e:
                continue
            found = next((op for op in self.ops if op.name == e.get("name")), None) if e["ph"] == "X" else None
            if found is not None:
                self.op_rows[i] = found.index
                continue
            start = _ns(e["ts"])
            inside = next((op for op in self.ops if op.start <= start < op.end), None)
            if inside is not None:
                self.plane[i] = inside.index
        self.trace = trace
        self.template = Template()
        self.template.add_text("[\n")
        for i, e in enumerate(trace):
            if i:
                self.template.add_text(",\n")
            if i in self.op_rows or i in self.plane:
                self.template.add_slot("event", i)
            elif "ts" in e:
                self.template.add(_slotted(e, ("ts",)), i)
            else:
                self.template.add_text(json.dumps(e))
        self.template.add_text("\n]\n")
        self.ts = {i: _ns(e["ts"]) for i, e in enumerate(trace) if "ts" in e}
        with open(output / "kernel_details.csv", newline="") as handle:
            self.kernel_rows = list(csv.reader(handle))
        self.shifted = {name: _Shifted((output / name).read_text()) for name in
                        ("memory_record.csv", "npu_module_mem.csv", "operator_memory.csv")}
        self.verbatim = {name: (output / name).read_bytes() for name in
                         ("api_statistic.csv", "l2_cache.csv", "op_statistic.csv", "operator_details.csv")}
        with open(output / "step_trace_time.csv", newline="") as handle:
            self.step_trace = list(csv.DictReader(handle))
        self.step_ns = next(round(e["dur"] * NS_PER_US) for e in trace
                            if str(e.get("name", "")).startswith("ProfilerStep#"))


def _npu_name(layer: str, index: int, order: int) -> str:
    return f"{layer}{index}"          # replaced by the communicator's hash (NpuJob._name_groups)


def _group_hash(name: str) -> str:
    """msprof's double hash of a communicator name (perfsight.ingest.ascend.hccl_groups.group_hash)."""
    from perfsight.ingest.ascend.hccl_groups import group_hash
    return group_hash(name)


class NpuJob:
    """Each rank's folder of the npu job (module docstring)."""

    def __init__(self, job: Job, base: NpuBase):
        self.job, self.base = job, base
        self._name_groups()
        rng = np.random.default_rng(job.seed + 2)
        world = job.world
        self.delay = np.zeros((len(base.ops), world), np.int64)
        self.start = np.zeros((len(base.ops), world), np.int64)
        self.wait = np.zeros((len(base.ops), world), np.int64)
        for op in base.ops:
            slack = op.elapse - op.transit
            jitter_cap = max(1, min(job.jitter_ns, slack // 4))
            delay = rng.integers(0, jitter_cap, world)
            delay[job.slow_ranks] = min(job.slow_delay_ns, slack * 9 // 10)
            self.delay[op.index] = delay
            start = op.start + delay
            layer = job.layer_of(op.layer)
            which = job.member[layer]
            latest = np.full(len(job.layer_groups[layer]), np.iinfo(np.int64).min)
            np.maximum.at(latest, which, start)
            self.start[op.index] = start
            self.wait[op.index] = latest[which] - start

    def _name_groups(self) -> None:
        """Communicator names (HCCL's ip%iface_port_index_timestamp form), hashed as communication.json
        names groups; the op names' 3-digit tag (``hcom_allReduce__586_...``) differs per group of a rank."""
        job = self.job
        renamed = {}
        used_tags: set[str] = set()
        for order, group in enumerate(list(job.groups.values())):
            k = 0
            while True:
                node = group.ranks[0] // job.per_node
                communicator = f"10.0.{node // 256}.{node % 256}%eth0_{60000 + order}_{k}_1736408883000000"
                hashed = _group_hash(communicator)
                if hashed[-3:] not in used_tags and hashed not in renamed:
                    break
                k += 1
            used_tags.add(hashed[-3:])
            group.name, group.communicator = hashed, communicator
            renamed[hashed] = group
        job.groups = renamed

    def op_name(self, op: HcclOp, group: Group) -> str:
        kind, _, _, last = _HCCL_OP.match(op.name).groups()
        sequence = sum(1 for other in self.base.ops[:op.index] if self.job.layer_of(other.layer) ==
                       self.job.layer_of(op.layer))
        return f"hcom_{kind}__{group.name[-3:]}_{sequence}_{last}"

    def write(self, rank: int, out: Path) -> None:
        job, base = self.job, self.base
        offset = int(job.offsets[rank])
        folder = out / f"rank{rank}_ascend_pt"
        output = folder / "ASCEND_PROFILER_OUTPUT"
        output.mkdir(parents=True, exist_ok=True)
        info = json.loads(json.dumps(base.info))
        info["rank_id"] = rank
        end_info = info.get("end_info", {})
        if "collectionTimeEnd" in end_info:
            end_info["collectionTimeEnd"] = int(end_info["collectionTimeEnd"]) + offset
        (folder / f"profiler_info_{rank}.json").write_text(json.dumps(info, indent=4))
        mine = [g for g in job.groups.values() if rank in g.ranks and g.layer != "p2p"]
        metadata = {**base.metadata,
                    "distributed_args": {"rank": rank, "world_size": job.world,
                                         "tensor_model_parallel_size": job.per_node,
                                         "pipeline_model_parallel_size": 1, "data_parallel_size": job.nodes},
                    "parallel_group_info": {g.communicator: {"group_name": g.description.lower(),
                                                             "group_rank": g.ranks.index(rank),
                                                             "global_ranks": g.ranks} for g in mine}}
        (folder / "profiler_metadata.json").write_text(json.dumps(metadata, indent=4))
        names = {op.index: self.op_name(op, job.group_of(op.layer, rank)) for op in base.ops}
        (output / "trace_view.json").write_text(self._trace(rank, offset, names))
        (output / "kernel_details.csv").write_text(self._kernels(rank, offset, names))
        (output / "communication.json").write_text(self._communication(rank, offset, names))
        (output / "communication_matrix.json").write_text(json.dumps(self._matrix(rank, names)))
        (output / "step_trace_time.csv").write_text(self._step_trace(rank))
        for name, shifted in base.shifted.items():
            (output / name).write_text(shifted.render(offset))
        for name, raw in base.verbatim.items():
            (output / name).write_bytes(raw)

    def _trace(self, rank: int, offset: int, names: dict[int, str]) -> str:
        base = self.base
        values = []
        for kind, i in base.template.slots:
            event = base.trace[i]
            if kind == "ts":
                values.append(f'"{_us(base.ts[i] + offset)}"')
                continue
            index = base.op_rows.get(i, base.plane.get(i))
            op = base.ops[index]
            start = int(self.start[index, rank])
            ts = start if i in base.op_rows else max(base.ts[i], start)
            out = dict(event, ts=_us(ts + offset))
            if "dur" in event:
                end = op.end if i in base.op_rows else max(base.ts[i] + round(event["dur"] * NS_PER_US), start)
                out["dur"] = float(_us(end - ts))
            if i in base.op_rows:
                out["name"] = names[index]
            values.append(json.dumps(out))
        return base.template.render(values)

    def _kernels(self, rank: int, offset: int, names: dict[int, str]) -> str:
        rows = self.base.kernel_rows
        header = rows[0]
        name_at, start_at, dur_at = (header.index(c) for c in ("Name", "Start Time(us)", "Duration(us)"))
        by_name = {op.name: op for op in self.base.ops}
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        for row in rows[1:]:
            row = list(row)
            op = by_name.get(row[name_at])
            if op is not None:
                start = int(self.start[op.index, rank])
                row[name_at] = names[op.index]
                row[start_at] = _us(start + offset) + "\t"
                row[dur_at] = _us(op.end - start)
            else:
                row[start_at] = _us(_ns(row[start_at]) + offset) + "\t"
            writer.writerow(row)
        return buffer.getvalue()

    def _communication(self, rank: int, offset: int, names: dict[int, str]) -> str:
        job = self.job
        ops = {}
        for op in self.base.ops:
            group = job.group_of(op.layer, rank)
            start, wait = int(self.start[op.index, rank]), int(self.wait[op.index, rank])
            elapse = op.end - start
            sync = wait
            transit = op.transit
            times = {"Start Timestamp(us)": _Raw(_us(start + offset)), "Elapse Time(ms)": elapse / 1e6,
                     "Transit Time(ms)": transit / 1e6, "Wait Time(ms)": wait / 1e6,
                     "Synchronization Time(ms)": sync / 1e6, "Idle Time(ms)": (elapse - transit - wait) / 1e6,
                     "Wait Time Ratio": round(wait / (wait + transit), 4) if wait + transit else 0,
                     "Synchronization Time Ratio": round(sync / (sync + transit), 4) if sync + transit else 0}
            ops[f"{names[op.index]}@{group.name}"] = {_TIME_INFO: times,
                                                      _BANDWIDTH_INFO: self._bandwidth(rank, op, group)}
        return _dumps({self.base.step_key: {"p2p": {}, "collective": ops}})

    def _transport(self, src: int, dst: int) -> str:
        if src == dst:
            return "LOCAL"
        return "HCCS" if src // self.job.per_node == dst // self.job.per_node else "RDMA"

    def _bandwidth(self, rank: int, op: HcclOp, group: Group) -> dict:
        base = op.info[_BANDWIDTH_INFO]
        links = self._links(rank, group)
        transports = {self._transport(rank, peer) for peer in links if peer != rank}
        out = {}
        for link in ("RDMA", "HCCS", "PCIE", "SDMA", "SIO"):
            size_mb = op.bytes / 1e6 if link in transports or (link == "SDMA" and "HCCS" in transports) else 0
            gbps = LINK_GBPS.get("HCCS" if link == "SDMA" else link, 0)
            if link == "RDMA" and self.job.slow_link and rank == self.job.slow_link[0] and \
                    self.job.slow_link[1] in links:
                gbps /= self.job.slow_link_factor
            ms = size_mb / gbps if size_mb else 0
            entry = dict(base.get(link, {}))
            entry.update({"Transit Size(MB)": size_mb, "Transit Time(ms)": ms,
                          "Bandwidth(GB/s)": round(size_mb / ms, 4) if ms else 0})
            if not size_mb:
                entry["Size Distribution"] = {}
            out[link] = entry
        return out

    def _links(self, rank: int, group: Group) -> list[int]:
        """The peers ``rank`` sends to in ``group``: itself, every member of a TP group, its ring neighbours
        in the others."""
        if group.layer == "tp":
            return list(group.ranks)
        at = group.ranks.index(rank)
        return sorted({rank, group.ranks[(at + 1) % len(group.ranks)], group.ranks[at - 1]})

    def _matrix(self, rank: int, names: dict[int, str]) -> dict:
        job = self.job
        by_group: dict[str, list[HcclOp]] = {}
        for op in self.base.ops:
            by_group.setdefault(job.group_of(op.layer, rank).name, []).append(op)
        entries = {}
        for name, ops in by_group.items():
            group = job.groups[name]
            own = group.ranks.index(rank)
            ranked = sorted(ops, key=lambda op: -op.elapse)
            picks = {"top1": ranked[0], "middle": ranked[len(ranked) // 2], "bottom1": ranked[-1],
                     "bottom2": ranked[max(-2, -len(ranked))], "bottom3": ranked[max(-3, -len(ranked))]}
            for key, op in list(picks.items()) + [("total", None)]:
                chosen = ops if op is None else [op]
                links = {}
                for peer in self._links(rank, group):
                    transport = self._transport(rank, peer)
                    gbps = LINK_GBPS[transport]
                    if (rank, peer) == job.slow_link:
                        gbps /= job.slow_link_factor
                    size = sum(o.bytes for o in chosen) / len(group.ranks) / 1e6
                    ms = size / gbps
                    links[f"{own}-{group.ranks.index(peer)}"] = {
                        "Transport Type": transport, "Transit Size(MB)": size, "Transit Time(ms)": ms,
                        "Bandwidth(GB/s)": round(size / ms, 4),
                        "Op Name": names[max(chosen, key=lambda o: o.bytes).index]}
                entries[f"allreduce-{key}@{name}"] = links
        return {self.base.step_key: {"p2p": {}, "collective": entries}}

    def _step_trace(self, rank: int) -> str:
        moved = int(self.delay[:, rank].sum()) / NS_PER_US          # us
        rows = []
        for row in self.base.step_trace:
            row = dict(row)
            exposed = float(row["Communication(Not Overlapped)"])
            shift = min(moved, exposed)
            for column in ("Communication(Not Overlapped)", "Communication",
                           "Communication(Not Overlapped and Exclude Receive)"):
                if column in row:
                    row[column] = repr(float(row[column]) - shift)
            row["Free"] = repr(float(row["Free"]) + shift)
            rows.append(row)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(self.base.step_trace[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buffer.getvalue()

    def answers(self) -> dict:
        job = self.job
        link = None
        if job.slow_link is not None:
            link = {"src": job.slow_link[0], "dst": job.slow_link[1], "transport": "RDMA",
                    "bandwidth_gbps": LINK_GBPS["RDMA"] / job.slow_link_factor, "others_gbps": LINK_GBPS["RDMA"],
                    "factor": job.slow_link_factor}
        return {"steps": [self.base.step], "slow_link": link, "mean_step_ns": [self.base.step_ns] * job.world,
                "paths": {str(r): f"rank{r}_ascend_pt" for r in range(job.world)}}


class _Raw(str):
    """A JSON number written as this exact text (``_dumps``)."""


def _dumps(value) -> str:
    """JSON with ``_Raw`` values written as bare numbers."""
    raws: list[str] = []

    def mark(item):
        if isinstance(item, _Raw):
            raws.append(str(item))
            return f"\0raw{len(raws) - 1}\0"
        if isinstance(item, dict):
            return {k: mark(v) for k, v in item.items()}
        return item

    text = json.dumps(mark(value))
    return re.sub(r'"\\u0000raw(\d+)\\u0000"', lambda m: raws[int(m.group(1))], text)


# --- driver ----------------------------------------------------------------------------------------------

_STATE: dict = {}


def _write_rank(rank: int) -> int:
    job, out = _STATE["job"], _STATE["out"]
    if isinstance(job, GpuJob):
        (out / f"rank{rank}.pt.trace.json").write_text(job.render(rank))
    else:
        job.write(rank, out)
    return rank


def generate(kind: str, ranks: int, out, *, seed: int = 0, ranks_per_node: int = 8, slow_ranks: int = 1,
             slow_rank_list: list[int] | None = None, slow_delay_ns: int = SLOW_DELAY_NS,
             slow_link: tuple[int, int] | None = None, slow_link_factor: float = SLOW_LINK_FACTOR,
             offsets: bool = True, steps: int | None = None, lean: bool = False, workers: int = 1,
             shape: str = "standard", data: Path = DEFAULT_DATA) -> dict:
    """Write the ``kind`` job of ``ranks`` ranks into ``out`` with its answers.json; return the answers."""
    began = time.perf_counter()
    out = Path(out)
    data = Path(data)
    if out.resolve().is_relative_to(data.resolve()):
        raise SystemExit(f"--out {out}: never inside the shared data {data}")
    if shape not in SHAPES or (shape != "standard" and kind != "gpu"):
        raise SystemExit(f"--shape {shape}: one of {', '.join(SHAPES)}; shapes other than standard are gpu's")
    if shape == "no_args" and lean:
        raise SystemExit("--shape no_args: the collectives are known from the host ranges, which --lean drops")
    out.mkdir(parents=True, exist_ok=True)
    job = _plants(kind, ranks, ranks_per_node, seed, slow_ranks, slow_rank_list, slow_delay_ns, slow_link,
                  slow_link_factor, offsets)
    if kind == "gpu":
        _layout(job, _gpu_name)
        generator: GpuJob | NpuJob = GpuJob(job, GpuBase(data, steps, lean, shape in BARE_SHAPES), shape)
    elif kind == "npu":
        _layout(job, _npu_name)
        generator = NpuJob(job, NpuBase(data))
    else:
        raise SystemExit(f"--kind {kind}: gpu or npu")
    _STATE.update(job=generator, out=out)
    if workers > 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for _ in pool.imap_unordered(_write_rank, range(ranks), chunksize=max(1, ranks // (workers * 8))):
                pass
    else:
        for rank in range(ranks):
            _write_rank(rank)
    if shape == "fused":
        _fuse(out, ranks)
    answers = {"kind": kind, "world_size": ranks, "ranks_per_node": ranks_per_node, "nodes": job.nodes,
               "seed": seed, "lean": lean,
               "groups": {name: {"layer": g.layer, "ranks": g.ranks, "description": g.description,
                                 **({"communicator": g.communicator} if g.communicator else {})}
                          for name, g in job.groups.items()},
               "slow_ranks": job.slow_ranks, "slow_delay_ns": job.slow_delay_ns,
               "clock_offsets_ns": [int(o) for o in job.offsets], "jitter_ns": job.jitter_ns,
               **generator.answers()}
    answers["seconds"] = round(time.perf_counter() - began, 3)
    (out / "answers.json").write_text(json.dumps(answers, indent=1))
    return answers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("gpu", "npu"), required=True)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--slow-ranks", type=int, default=1, help="how many slow ranks the seed chooses")
    parser.add_argument("--slow-rank", type=int, action="append", help="a slow rank (repeat; over --slow-ranks)")
    parser.add_argument("--slow-delay-us", type=float, default=SLOW_DELAY_NS / NS_PER_US)
    parser.add_argument("--slow-link", help="SRC,DST (a pair r, r + ranks-per-node); default chosen by the seed")
    parser.add_argument("--slow-link-factor", type=float, default=SLOW_LINK_FACTOR)
    parser.add_argument("--offsets", choices=("on", "off"), default="on")
    parser.add_argument("--steps", type=int, help="gpu: keep the first K of the base's 3 steps")
    parser.add_argument("--lean", action="store_true", help="gpu: device events and steps only (~0.7 MB/step)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--shape", choices=SHAPES, default="standard", help="gpu: a real job's shape (see above)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder (read only)")
    args = parser.parse_args(argv)
    link = tuple(int(x) for x in args.slow_link.split(",")) if args.slow_link else None
    answers = generate(args.kind, args.ranks, args.out, seed=args.seed, ranks_per_node=args.ranks_per_node,
                       slow_ranks=args.slow_ranks, slow_rank_list=args.slow_rank,
                       slow_delay_ns=round(args.slow_delay_us * NS_PER_US), slow_link=link,  # type: ignore[arg-type]
                       slow_link_factor=args.slow_link_factor, offsets=args.offsets == "on", steps=args.steps,
                       lean=args.lean, workers=args.workers, shape=args.shape, data=args.data)
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(json.dumps({"out": str(args.out), "ranks": args.ranks, "bytes": size, "seconds": answers["seconds"],
                      "slow_ranks": answers["slow_ranks"], "slow_link": answers["slow_link"]}))


if __name__ == "__main__":
    sys.exit(main())
