"""perfsight's critical path against Holistic Trace Analysis' critical path analysis on the shared traces it
supports, HTA's answers recorded in tests/data/hta_critical_path by ``bench/critical_path_peer.py reference``
(HTA 0.6.1; each case's window: the annotation instance or step HTA was given, or the whole trace).

Where the two agree and why they differ:

* Both are a longest path through start/end nodes of host slices and kernels, linked by nesting, launches,
  stream order, event waits and synchronisations; both replay to the trace's own times. perfsight's path
  spans the whole window and its pieces add up to it exactly; HTA's runs from its first to its last node in
  the window and weighs the edges between consecutive top-level operators (the untraced time between them,
  Python's) 0, so its path is shorter than the window by its ends and those gaps: HTA's weight + (window -
  HTA's weight) = perfsight's path, and perfsight counts that difference as ``idle``.
* On AlexNet (device-bound in parts) the same 34 kernels of the same durations are on both paths, the same
  launch overhead, and the rest (HTA's cpu_bound and kernel-kernel gaps) is perfsight's host, idle, gap and
  synchronisation time to the microsecond.
* Where the device finishes before the host asks for it (simple_add: the last kernel ends 240 us before
  ``cudaDeviceSynchronize`` is called), HTA can still route its path through the kernels: its zero-weight
  gaps make the host route lighter. In perfsight the host, busy until then, is the path: the step would not
  get shorter if those kernels did.
* A blocking copy to pageable memory (``Memcpy DtoH (Device -> Pageable)``, what ``.item()`` does) holds the
  host until it is done (``syncs.synchronisations``); HTA knows only Kineto's cuda_sync events, so on
  event_sync perfsight's path has that copy and HTA's does not.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import perfsight
from perfsight.analysis import critical_path as cp

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "hta_critical_path"
ALEXNET_MEASURE = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
US = 1000
HOST = ("runtime", "host_ops", "python", "dataloader", "idle", "synchronisation")
DEVICE = ("compute", "communication", "memory")


def hta(case: str) -> dict:
    return json.loads((REFERENCE / f"{case}.json").read_text())


def hta_short_name(name: str) -> str:
    """HTA's ``shorten_name``: template and function arguments removed, the last word kept; memory tasks whole."""
    if name.startswith(("Memcpy", "Memset")):
        return name
    stack: list[str] = []
    for c in name.replace("->", ""):
        if c in ">)":
            opening = "<" if c == ">" else "("
            while stack and stack[-1] != opening:
                stack.pop()
            if stack:
                stack.pop()
        else:
            stack.append(c)
    return "".join(stack).split(" ")[-1]


def ours(shared_data, folder: str, **window) -> tuple[dict[str, int], list[dict], int]:
    """(us by category, the path's pieces, the window in us) of the case's window."""
    run = perfsight.open(shared_data / "kineto" / "hta" / folder)
    breakdown = run.critical_path_breakdown(**window).to_pylist()
    assert len({row["window"] for row in breakdown}) == 1
    return ({row["category"]: row["dur_ns"] // US for row in breakdown}, run.critical_path(**window).to_pylist(),
            breakdown[0]["path_ns"] // US)


def test_alexnet_the_same_kernels_launches_and_host_time(shared_data):
    reference = hta("alexnet")
    by_category, path, window = ours(shared_data, "critical_path/alexnet", annotation=ALEXNET_MEASURE, instance=1)
    assert window == 36356 and sum(by_category.values()) == window
    bound = reference["bound_by_us"]
    assert by_category["compute"] + by_category["memory"] == bound["gpu_compute_bound"] == 3712
    assert by_category["launch"] == bound["gpu_kernel_launch_overhead"] == 30
    host = sum(by_category.get(c, 0) for c in (*HOST, "kernel_gap"))
    assert host == bound["cpu_bound"] + bound["gpu_kernel_kernel_overhead"] + (window - reference["weight_us"])
    kernels = Counter((hta_short_name(p["name"]), p["dur_ns"] // US) for p in path if p["edge"] == "device")
    assert kernels == Counter((e["name"], e["duration_us"]) for e in reference["device_edges"]
                              if e["type"] == "critical_path_operator")
    assert sum(kernels.values()) == 34


def test_simple_add_host_bound_where_the_device_finished_before_the_host_asked(shared_data):
    reference = hta("simple_add")
    by_category, path, window = ours(shared_data, "critical_path/simple_add", annotation=ALEXNET_MEASURE,
                                     instance=1)
    assert window == 243351 and sum(by_category.values()) == window
    assert not set(by_category) & set(DEVICE)
    # HTA: 99.8% cpu_bound, its 508 us of kernels routed through a sync the host reached after they ended
    assert reference["bound_by_us"]["cpu_bound"] / reference["weight_us"] > 0.99
    syncs = [(p["edge"], p["dur_ns"] // US) for p in path if p["name"] == "cudaDeviceSynchronize"]
    assert syncs == [("host", 17), ("host", 21)]         # they waited for nothing: their own time


def test_event_sync_the_spin_kernel_and_the_blocking_copy(shared_data):
    reference = hta("event_sync")
    by_category, path, window = ours(shared_data, "critical_path/cuda_event_sync", annotation="ProfilerStep",
                                     instance=0)
    assert window == 3154 and sum(by_category.values()) == window
    device = Counter((hta_short_name(p["name"]), p["dur_ns"] // US) for p in path if p["edge"] == "device")
    assert Counter((e["name"], e["duration_us"]) for e in reference["device_edges"]
                   if e["type"] == "critical_path_operator") == Counter({("at::cuda::::spin_kernel", 36): 1})
    assert device == Counter({("at::cuda::::spin_kernel", 36): 1, ("Memcpy DtoH (Device -> Pageable)", 2): 1})
    assert by_category["compute"] == reference["bound_by_us"]["gpu_compute_bound"] == 36


def test_multi_stream_event_waits_are_dependencies(shared_data):
    run = perfsight.open(shared_data / "kineto" / "hta" / "critical_path" / "cuda_event_sync_multi_stream")
    [window] = cp.windows(run.tables)
    graph = cp.graph(run.tables, window)
    assert int((graph.kind == cp.EDGE_KINDS.index("event_wait")).sum()) == 1
    by_category = {r["category"]: r["dur_ns"] // US for r in run.critical_path_breakdown().to_pylist()}
    reference = hta("event_sync_multi_stream")
    # the same spin kernel on both paths; HTA's also holds a 1 us memset its zero-weight gaps route through
    assert by_category["compute"] == 123
    assert sorted(e["duration_us"] for e in reference["device_edges"] if e["type"] == "critical_path_operator") \
        == [1, 123]


@pytest.mark.parametrize("case,folder,window", [
    ("alexnet", "critical_path/alexnet", {"annotation": ALEXNET_MEASURE, "instance": 1}),
    ("simple_add", "critical_path/simple_add", {"annotation": ALEXNET_MEASURE, "instance": 1}),
    ("event_sync", "critical_path/cuda_event_sync", {"annotation": "ProfilerStep", "instance": 0}),
    ("event_sync_multi_stream", "critical_path/cuda_event_sync_multi_stream", {}),
    ("df_index_resolver", "df_index_resolver", {"step": 2, "rank": 1}),
])
def test_every_case_replays_exactly_and_agrees_on_host_or_device_bound(shared_data, case, folder, window):
    run = perfsight.open(shared_data / "kineto" / "hta" / folder)
    [found] = cp.windows(run.tables, **window)
    graph = cp.graph(run.tables, found)
    time, _ = cp._replay(graph)
    assert time == graph.node_ns.tolist() and graph.dropped_edges == 0
    by_category = {r["category"]: r["dur_ns"] for r in run.critical_path_breakdown(**window).to_pylist()}
    reference = hta(case)
    ours_host = sum(v for c, v in by_category.items() if c in HOST) / sum(by_category.values())
    theirs_host = reference["bound_by_us"].get("cpu_bound", 0) / reference["weight_us"]
    assert (ours_host > 0.5) == (theirs_host > 0.5)
