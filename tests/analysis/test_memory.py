"""memory_curve / memory_peak / allocations_by_op / tensor_lifetimes / alive_at_peak: planted events on
top of the planted training run, and the real CPU trace's [memory] events."""
import pytest

from perfsight.analysis import memory
from perfsight.core.tables import RunTables, conform
from perfsight.ingest.kineto.reader import read_kineto

from .planted import AUTOGRAD, BASE, MAIN, training_run
from .planted_host import CPU_TRACE, raw_events

A, B, C, D, E = 0x1000, 0x2000, 0x3000, 0x4000, 0x5000


def _event(t, addr, nbytes, total, op, *, reserved=2048, device="cuda:0", track=MAIN):
    return {"ts_ns": BASE + t, "addr": addr, "bytes": nbytes, "total_allocated": total, "total_reserved": reserved,
            "device": device, "track_id": track, "op_slice_id": op}


# cuda:0 peaks at 3500 bytes at t=11500 (step 2, aten::linear id 25); B (500) and C (3000) are alive then.
EVENTS = [
    _event(1650, A, 1000, 1000, 5),                     # aten::addmm, step 1
    _event(3300, B, 500, 1500, 10),                     # aten::relu
    _event(3300, A, -1000, 500, None),                  # same ns: after B's allocation (row order)
    _event(11500, C, 3000, 3500, 25, reserved=4096),    # aten::linear, step 2: the peak
    _event(14500, C, -3000, 500, 28),                   # AddmmBackward0 frees C
    _event(15000, D, 100, 600, 28),
    # a cpu allocation on the autograd thread, with 1000 bytes allocated before the trace began
    _event(4500, E, 64, 1064, 13, reserved=0, device="cpu", track=AUTOGRAD),
]


def planted() -> RunTables:
    import pyarrow as pa

    tables = training_run()
    columns = {name: [row[name] for row in EVENTS] for name in EVENTS[0]}
    tables.memory = conform("memory", pa.table(columns))
    return tables


def test_curve_orders_events_and_keeps_same_ns_source_order():
    rows = [r for r in memory.memory_curve(planted()).to_pylist() if r["device"] == "cuda:0"]
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["allocated_bytes"] for r in rows] == [1000, 1500, 500, 3500, 500, 600]
    assert [r["bytes"] for r in rows] == [1000, 500, -1000, 3000, -3000, 100]
    assert [r["reserved_bytes"] for r in rows] == [2048, 2048, 2048, 4096, 2048, 2048]
    assert [r["op_type"] for r in rows] == ["aten::addmm", "aten::relu", None, "aten::linear", "AddmmBackward0",
                                            "AddmmBackward0"]
    assert [r["step"] for r in rows] == [1, 1, 1, 2, 2, 2]


def test_peak_per_device_with_step_op_and_tracked_bytes():
    rows = {r["device"]: r for r in memory.memory_peak(planted()).to_pylist()}
    gpu = rows["cuda:0"]
    assert (gpu["peak_allocated_bytes"], gpu["peak_ts_ns"], gpu["step"]) == (3500, BASE + 11500, 2)
    assert (gpu["op_slice_id"], gpu["op_type"], gpu["op_name"]) == (25, "aten::linear", "aten::linear")
    assert (gpu["peak_reserved_bytes"], gpu["alive_tracked_bytes"], gpu["events"]) == (4096, 3500, 6)
    cpu = rows["cpu"]
    assert (cpu["peak_allocated_bytes"], cpu["alive_tracked_bytes"], cpu["op_type"], cpu["rank"]) == (
        1064, 64, "aten::mm", 0)


def test_allocations_by_op():
    rows = {r["op_type"]: r for r in memory.allocations_by_op(planted()).to_pylist() if r["device"] == "cuda:0"}
    assert rows["aten::linear"]["alloc_bytes"] == 3000 and rows["aten::linear"]["alloc_count"] == 1
    backward = rows["AddmmBackward0"]
    assert (backward["alloc_count"], backward["alloc_bytes"], backward["free_count"], backward["freed_bytes"],
            backward["net_bytes"]) == (1, 100, 1, 3000, -2900)
    assert (rows[None]["free_count"], rows[None]["freed_bytes"], rows[None]["alloc_count"]) == (1, 1000, 0)
    assert list(rows)[:2] == ["aten::linear", "aten::addmm"]       # largest allocations first


def test_lifetimes_match_frees_by_address():
    rows = {r["addr"]: r for r in memory.tensor_lifetimes(planted()).to_pylist()}
    assert (rows[A]["lifetime_ns"], rows[A]["free_ts_ns"]) == (1650, BASE + 3300)
    assert rows[C]["lifetime_ns"] == 3000 and rows[C]["op_type"] == "aten::linear"
    assert rows[B]["free_ts_ns"] is None and rows[D]["free_ts_ns"] is None


def test_alive_at_peak_sizes_ages_and_ops():
    rows = [r for r in memory.alive_at_peak(planted()).to_pylist() if r["device"] == "cuda:0"]
    assert [(r["addr"], r["bytes"], r["age_ns"], r["op_type"], r["step"]) for r in rows] == [
        (C, 3000, 0, "aten::linear", 2), (B, 500, 8200, "aten::relu", 1)]
    assert [r["share"] for r in rows] == pytest.approx([3000 / 3500, 500 / 3500])


def test_empty_run():
    for fn in (memory.memory_curve, memory.memory_peak, memory.allocations_by_op, memory.tensor_lifetimes,
               memory.alive_at_peak):
        assert fn(RunTables()).num_rows == 0


def test_real_cpu_trace_against_its_memory_events(shared_data):
    path = shared_data / CPU_TRACE
    raw = [e["args"] for e in raw_events(path) if e.get("name") == "[memory]"]
    tables = read_kineto([path])
    curve = memory.memory_curve(tables)
    assert curve.num_rows == len(raw) == 86
    peak = memory.memory_peak(tables).to_pylist()
    assert len(peak) == 1 and peak[0]["device"] == "cpu"
    assert peak[0]["peak_allocated_bytes"] == max(a["Total Allocated"] for a in raw)
    assert peak[0]["step"] in (2, 3, 4) and peak[0]["op_type"].startswith("aten::")
    by_op = memory.allocations_by_op(tables)
    assert sum(by_op["alloc_bytes"].to_pylist()) == sum(a["Bytes"] for a in raw if a["Bytes"] > 0)
    assert sum(by_op["freed_bytes"].to_pylist()) == -sum(a["Bytes"] for a in raw if a["Bytes"] < 0)
    alive = memory.alive_at_peak(tables)
    assert sum(alive["bytes"].to_pylist()) == peak[0]["alive_tracked_bytes"] <= peak[0]["peak_allocated_bytes"]
    # the trace starts from nothing allocated, so every byte at the peak is a tracked allocation
    assert peak[0]["alive_tracked_bytes"] == peak[0]["peak_allocated_bytes"]
    assert min(alive["age_ns"].to_pylist()) >= 0
    # a matched free releases exactly what its allocation took
    frees = {(a["Addr"], a["Bytes"]) for a in raw if a["Bytes"] < 0}
    lifetimes = memory.tensor_lifetimes(tables).to_pylist()
    assert all((r["addr"], -r["bytes"]) in frees for r in lifetimes if r["free_ts_ns"] is not None)


def test_alive_at_a_time_takes_every_event_up_to_it():
    def alive(t, **kw):
        return [(r["device"], r["addr"], r["bytes"], r["age_ns"], r["share"])
                for r in memory.alive_at(planted(), BASE + t, **kw).to_pylist()]

    assert alive(100) == []                                             # before the first event
    assert alive(3299, device="cuda:0") == [("cuda:0", A, 1000, 1649, 1.0)]
    # both events at 3300 have happened: B allocated, A freed; 500 of 500 allocated
    assert alive(3300, device="cuda:0") == [("cuda:0", B, 500, 0, 1.0)]
    assert alive(12000, device="cuda:0") == [("cuda:0", C, 3000, 500, 3000 / 3500),
                                             ("cuda:0", B, 500, 8700, 500 / 3500)]
    assert alive(12000, device="cpu") == [("cpu", E, 64, 7500, 64 / 1064)]
    assert alive(12000, rank=1) == []
    # at the peak's time it is alive_at_peak
    at_peak = memory.alive_at(planted(), BASE + 11500, device="cuda:0")
    assert at_peak.to_pylist() == [r for r in memory.alive_at_peak(planted()).to_pylist() if r["device"] == "cuda:0"]


def test_alive_by_op_at():
    rows = memory.alive_by_op_at(planted(), BASE + 11500, device="cuda:0").to_pylist()
    assert [(r["op_type"], r["tensors"], r["bytes"]) for r in rows] == [("aten::linear", 1, 3000),
                                                                        ("aten::relu", 1, 500)]
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert memory.alive_by_op_at(RunTables(), 0).num_rows == 0


def test_sampled_curve_keeps_peak_trough_and_ends():
    full = [r["seq"] for r in memory.memory_curve_sampled(planted()).to_pylist() if r["device"] == "cuda:0"]
    assert full == [1, 2, 3, 4, 5, 6]
    # one bucket: its highest (seq 4, the peak), its lowest (500 at seq 3 and 5: the earliest), first, last
    thin = [r["seq"] for r in memory.memory_curve_sampled(planted(), max_points=2).to_pylist()
            if r["device"] == "cuda:0"]
    assert thin == [1, 3, 4, 6]
    with pytest.raises(ValueError, match="max_points"):
        memory.memory_curve_sampled(planted(), max_points=1)


def test_sampled_curve_of_many_events_bounds_points_and_keeps_extremes():
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 1000, 20_000) * rng.choice([1, -1], 20_000, p=[0.52, 0.48])
    totals = np.cumsum(sizes) + 10**9
    tables = training_run()
    tables.memory = conform("memory", pa.table({
        "ts_ns": BASE + np.arange(sizes.size) * 10, "addr": pa.nulls(sizes.size, pa.int64()), "bytes": sizes,
        "total_allocated": totals, "total_reserved": totals, "device": ["cuda:0"] * sizes.size,
        "track_id": [MAIN] * sizes.size, "op_slice_id": pa.nulls(sizes.size, pa.int64())}))
    thin = memory.memory_curve_sampled(tables, max_points=500)
    values = thin["allocated_bytes"].to_numpy()
    assert thin.num_rows <= 502
    assert values.max() == totals.max() and values.min() == totals.min()
    peak_at = thin["allocated_bytes"].to_pylist().index(totals.max())
    assert thin["seq"].to_pylist()[peak_at] == int(np.argmax(totals)) + 1
    assert thin["seq"].to_pylist()[0] == 1 and thin["seq"].to_pylist()[-1] == sizes.size


def test_the_peak_of_a_run_without_memory_events_needs_no_query(monkeypatch):
    monkeypatch.setattr(RunTables, "sql", lambda *_, **__: pytest.fail("queried"))
    peak = memory.memory_peak(RunTables())
    assert peak.num_rows == 0 and peak.schema == memory.MEMORY_PEAK
