"""Helpers for the memory / data / resources / flops / dynamic-shape tests: a one-off in-process
perfsight run (tiny MLP, a DataLoader, memory and host sampling on) and reading raw Kineto JSON."""
from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

from .planted import BASE, TRACKS, tables_from_rows

CPU_TRACE = "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"


def raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def counter_track(track_id: int, name: str, rank: int = 0) -> dict:
    return {"track_id": track_id, "rank": rank, "pid": "100", "tid": None, "device": "cpu", "kind": "counter",
            "name": name, "sort_index": None}


def series(track_id: int, samples) -> list[dict]:
    """Counter rows of one track from (offset from BASE, value) pairs."""
    return [{"track_id": track_id, "ts_ns": BASE + t, "value": float(v)} for t, v in samples]


def host_only(slices, *, counters=(), tracks=(), memory=(), meta=None):
    return tables_from_rows(slices=slices, tracks=TRACKS + list(tracks), counters=list(counters),
                            memory=list(memory), meta=meta)


def _train(run_root: Path) -> Path:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import perfsight

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 16), torch.randint(0, 4, (32,))), batch_size=8)
    with perfsight.Profiler(output_path=run_root, profile_memory=True, record_shapes=True,
                            host_sys="cpu,mem", host_sys_usage="cpu,mem") as prof:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.03)              # >= 1 host sample (50 Hz) per step, however fast the machine
            prof.step()
    return prof.run_dir
