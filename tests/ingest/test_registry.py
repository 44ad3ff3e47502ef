"""The reader registry: every format once in one list; a new format is one Reader and one entry, found alike by
ingest.find_runs, perfsight.open, the CLI, export and insight's discovery; a job is the same runs whichever way
it is opened."""
from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
from pathlib import Path

import pyarrow.csv as pacsv
import pytest

import perfsight
import perfsight.ingest
from perfsight import ingest
from perfsight.cli import main
from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.core.tables import RunTables
from perfsight.ingest import cache, registry
from perfsight.ingest.ascend.formats import TorchNpuLightReader
from perfsight.ingest.common.build import RunBuilder
from perfsight.ingest.common.reader import Reader, RunSource
from perfsight.ingest.jobs import rank_in_name
from perfsight.run import open_sources
from perfsight.views.insight.discovery import discover
from tests.conftest import copy_shared

TOY_FILE = "toy_profile.csv"


class ToyReader(Reader):
    """A made-up format: a folder holding ``toy_profile.csv`` (name,start_ns,dur_ns: one CPU operator a row),
    its rank in the folder's name."""

    name = "toy"

    def runs_at(self, path: Path) -> list[RunSource]:
        return [RunSource(self, path)] if (path / TOY_FILE).is_file() else []

    def rank(self, run: RunSource) -> int | None:
        return rank_in_name(run.path.name)

    def sources(self, run: RunSource) -> list[Path]:
        return [run.path / TOY_FILE]

    def read(self, run: RunSource) -> RunTables:
        rows = pacsv.read_csv(run.path / TOY_FILE)
        builder = RunBuilder(sources=[str(run.path / TOY_FILE)])
        track = builder.track("thread", "cpu", "main", rank=self.rank(run))
        builder.add_slices({"track": [track] * rows.num_rows, "kind": ["cpu_op"] * rows.num_rows,
                            "name": rows["name"], "start_ns": rows["start_ns"], "dur_ns": rows["dur_ns"]})
        return builder.finish({"source_format": "toy", "rank": self.rank(run)})


def toy_run(folder: Path, rows: list[tuple[str, int, int]]) -> Path:
    folder.mkdir(parents=True)
    (folder / TOY_FILE).write_text("name,start_ns,dur_ns\n" + "".join(f"{n},{s},{d}\n" for n, s, d in rows))
    return folder


def test_every_reader_in_the_package_is_listed_once_in_the_order_tried():
    defined = set()
    for module in pkgutil.walk_packages(perfsight.ingest.__path__, "perfsight.ingest."):
        found = vars(importlib.import_module(module.name)).values()
        defined |= {c for c in found if isinstance(c, type) and issubclass(c, Reader) and c is not Reader}
    listed = [type(reader) for reader in registry.READERS]
    # a light read's reader is made by its format's reader (Reader.light), never found by a search
    assert len(listed) == len(set(listed)) and set(listed) == defined - {TorchNpuLightReader}
    assert [(type(r).__name__, r.name) for r in registry.READERS] == [
        ("PerfsightRunReader", "perfsight"), ("TorchNpuReader", "torch_npu"),
        ("MsprofReader", "msprof"), ("MindSporeLegacyReader", "mindspore"), ("KinetoReader", "torch.profiler")]


def test_a_new_format_is_one_reader_and_one_registry_entry(tmp_path, monkeypatch, capsys):
    job = tmp_path / "job"
    toy_run(job / "rank0", [("conv", 0, 300), ("relu", 400, 100)])
    toy_run(job / "rank1", [("conv", 0, 500)])
    alone = toy_run(tmp_path / "single" / "alone", [("gemm", 10, 70)])
    with pytest.raises(InputError, match="holds no run perfsight can read"):
        ingest.find_runs(job)

    monkeypatch.setattr(registry, "READERS", (*registry.READERS, ToyReader()))

    assert [(type(run.reader), run.path) for run in ingest.find_runs(job)] == [
        (ToyReader, job / "rank0"), (ToyReader, job / "rank1")]
    run = perfsight.open(job)
    assert run.ranks == [0, 1]
    totals = run.op_statistic(by="name").select(["rank", "name", "count", "total_ns"]).to_pylist()
    assert sorted(totals, key=lambda row: (row["rank"], row["name"])) == [
        {"rank": 0, "name": "conv", "count": 1, "total_ns": 300},
        {"rank": 0, "name": "relu", "count": 1, "total_ns": 100},
        {"rank": 1, "name": "conv", "count": 1, "total_ns": 500}]
    cache.wait()
    assert (job / "rank0" / layout.CACHE_DIR / cache.FINGERPRINT).is_file()    # the cache where the reader says

    found = {c.relpath: c for c in discover(tmp_path)}
    assert {path: c.kind for path, c in found.items()} == {"job": "toy job", "single/alone": "toy run"}
    assert found["job"].runs == tuple(ingest.find_runs(job))
    assert [p.name for p in found["single/alone"].sources] == [TOY_FILE]

    assert main(["analyse", str(job), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["export", "summary", "-dir", str(alone)]) == 0
    assert any((alone / layout.OUTPUT_DIR).glob("op_statistic_*.csv"))


@pytest.mark.parametrize("job", ["ascend/torch_npu/text/level1", "ascend/torch_npu/db/level1",
                                 "kineto/hta/trace_filter"])
def test_a_job_is_the_same_runs_through_open_and_discovery(shared_data, tmp_path, job):
    base = tmp_path / "base"
    copy_shared(shared_data / job, base / "job")
    [entry] = discover(base)
    assert (entry.relpath, entry.kind.endswith(" job")) == ("job", True)
    assert entry.runs == tuple(ingest.find_runs(base / "job"))
    opened = perfsight.open(base / "job")
    listed = open_sources(entry.path, list(entry.runs))
    assert opened.ranks == listed.ranks == [0, 1]
    assert opened.tables.slices.equals(listed.tables.slices)
    assert opened.tables.tracks.equals(listed.tables.tracks)


def test_traces_named_by_torch_profiler_are_one_job_by_their_distributed_info(shared_data, tmp_path):
    """torch.profiler's tensorboard_trace_handler names a trace ``<host>_<pid>.<time>.pt.trace.json``: no rank.
    The ranks their distributedInfo says (near the start of the file) make them one job before reading, as
    reading them does; before, insight listed each trace alone."""
    job = tmp_path / "base" / "job"
    job.mkdir(parents=True)
    for rank, name in ((0, "node-a_4037.1682725.pt.trace.json.gz"), (1, "node-b_4112.1682726.pt.trace.json.gz")):
        shutil.copy(shared_data / "kineto" / "hta" / "trace_filter" / f"sampled_rank-{rank}.json.gz", job / name)
    runs = ingest.find_runs(job)
    assert sorted(run.reader.rank(run) for run in runs) == [0, 1]
    [entry] = discover(tmp_path / "base")
    assert (entry.relpath, entry.kind.endswith(" job")) == ("job", True)
    assert perfsight.open(job).ranks == [0, 1]


def test_empty_exports_are_named_as_empty(tmp_path):
    """0-byte files named like exports: the folder's error names them as empty, not as "no run" alone; an empty
    file given by name says so; files of other names and non-empty ones are not listed."""
    for name in ("trace.json", "kernel_details.csv", "memory_record.csv", "notes.txt"):
        (tmp_path / name).touch()
    (tmp_path / "step_trace_time.csv").write_text("Step\n")
    with pytest.raises(InputError) as folder:
        ingest.find_runs(tmp_path)
    assert str(folder.value) == (f"{tmp_path}: holds no run perfsight can read: these files are empty (0 bytes): "
                                 "kernel_details.csv, memory_record.csv, trace.json")
    with pytest.raises(InputError) as file:
        ingest.find_runs(tmp_path / "trace.json")
    assert str(file.value).startswith(f"{tmp_path / 'trace.json'}: an empty file (0 bytes), not a run perfsight can "
                                      "read; expected")
    (tmp_path / "msprof_0.db").touch()                  # a run by its name: reading it says it is empty
    with pytest.raises(InputError) as database:
        perfsight.open(tmp_path / "msprof_0.db", use_cache=False)
    assert str(database.value) == (f"{tmp_path / 'msprof_0.db'}: an empty file (0 bytes); expected a profiler "
                                   "database (ascend_pytorch_profiler_{rank}.db, msprof_{N}.db)")
