"""The run manifest has one reader (core/layout.read_manifest): the reader of runs, the launcher, storage's
ageing and insight's job grouping all take a damaged manifest the same way, as not perfsight's."""
from __future__ import annotations

import json
import os

import pytest

import perfsight
from perfsight.collect.launch import runs_started_since
from perfsight.collect.storage import _perfsight_runs
from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.ingest.common.reader import RunSource
from perfsight.ingest.kineto.perfsight_run import PerfsightRunReader


def _manifest_rank(run):
    """The rank finding runs reads off a run's manifest (the registry's perfsight reader)."""
    reader = PerfsightRunReader()
    return reader.rank(RunSource(reader, run))


def _run(root, name, manifest_text):
    run = root / name
    (run / layout.HOST_DATA).mkdir(parents=True)
    (run / layout.MANIFEST).write_text(manifest_text)
    return run


def test_a_manifest_that_is_not_an_object_is_refused_alike_by_every_reader(tmp_path):
    run = _run(tmp_path, "PROF_20240101000000000_1_abcd", "[1, 2]")
    with pytest.raises(InputError, match=r"manifest.json: not a readable perfsight manifest \(a JSON list"):
        layout.read_manifest(run)
    with pytest.raises(InputError, match="not a readable perfsight manifest"):
        perfsight.open(run)                                   # raised AttributeError before
    assert runs_started_since(tmp_path, 0) == []              # raised AttributeError before
    assert _perfsight_runs(tmp_path) == []
    assert _manifest_rank(run) is None


def test_the_manifest_is_read_whole(tmp_path):
    manifest = {"format": "perfsight-run", "rank": 3, "start_ns": 5, "status": "complete", "traces": []}
    run = _run(tmp_path, "PROF_20240101000000000_1_abcd", json.dumps(manifest))
    assert layout.read_manifest(run) == manifest
    assert runs_started_since(tmp_path, 5) == [run] and runs_started_since(tmp_path, 6) == []
    assert [r.path for r in _perfsight_runs(tmp_path)] == [run]
    assert _manifest_rank(run) == 3


def test_a_fifo_in_place_of_the_manifest_is_refused_without_waiting(tmp_path):
    run = tmp_path / "PROF_20240101000000000_1_abcd"
    run.mkdir()
    os.mkfifo(run / layout.MANIFEST)
    with pytest.raises(InputError, match="a FIFO"):
        layout.read_manifest(run)
