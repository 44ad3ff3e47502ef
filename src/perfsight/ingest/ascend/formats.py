"""The Ascend formats as readers: torch_npu's profiler database and its text output, msprof PROF_ directories
and MindSpore's legacy flat folder (their entries in ``perfsight.ingest.registry``).

Each class recognises its runs by their file and folder names (``detect``) and imports its reader module
(DuckDB, SQLite: heavy) only once a run of its format is listed or read, so that finding a Kineto trace
does not pay for them.
"""
from __future__ import annotations

from pathlib import Path

from perfsight.core import layout
from perfsight.core.tables import RunTables
from perfsight.ingest.ascend.detect import (
    CLUSTER_FILES,
    find_torch_npu_db,
    is_mindspore_legacy_dir,
    is_msprof_dir,
    is_torch_npu_dir,
    msprof_without_data,
    rank_to_read,
    ranks_in,
    torch_npu_without_data,
)
from perfsight.ingest.common.reader import Reader, RunSource


class TorchNpuReader(Reader):
    """torch_npu's (and current MindSpore's) output folder (``*_ascend_pt`` / ``*_ascend_ms``): its SQLite export
    when it holds one, else its ``ASCEND_PROFILER_OUTPUT/`` text files, whichever of them it has; also a bare
    profiler database (``ascend_pytorch_profiler_N.db``, ``msprof_N.db``) or a folder holding only one."""

    name = "torch_npu"
    siblings_are_ranks = True     # one folder (or database) per rank, the rank said inside

    def runs_at(self, path: Path) -> list[RunSource]:
        found = is_torch_npu_dir(path) or find_torch_npu_db(path) is not None
        return [RunSource(self, path)] if found else []

    def without_data(self, path: Path) -> str | None:
        return torch_npu_without_data(path)

    def sources(self, run: RunSource) -> list[Path]:
        if find_torch_npu_db(run.path):
            from perfsight.ingest.ascend.torch_npu_db import sources
        else:
            from perfsight.ingest.ascend.torch_npu_text import sources
        return sources(run.path)

    def read(self, run: RunSource) -> RunTables:
        if find_torch_npu_db(run.path):
            from perfsight.ingest.ascend.torch_npu_db import read_torch_npu_db as read
        else:
            from perfsight.ingest.ascend.torch_npu_text import read_torch_npu_text as read
        return read(run.path)

    def light(self, run: RunSource) -> RunSource:
        """The text output read from only its profiler info and ``CLUSTER_FILES`` (``TorchNpuLightReader``); a
        database is read whole."""
        return run if find_torch_npu_db(run.path) else RunSource(TORCH_NPU_LIGHT, run.path)

    def cache_dir(self, run: RunSource) -> Path:
        """Inside the run's folder; beside a bare database (as a trace file's)."""
        return run.path.with_name(run.path.name + "." + layout.CACHE_DIR) if run.path.is_file() \
            else super().cache_dir(run)

    def output_dir(self, run: RunSource) -> Path:
        return run.path.parent / layout.OUTPUT_DIR / run.path.stem if run.path.is_file() else super().output_dir(run)


class TorchNpuLightReader(TorchNpuReader):
    """torch_npu's text output read light (``Reader.light``): its profiler info and ``detect.CLUSTER_FILES``
    only, the files msprof-analyze's cluster mode reads; a few kilobytes a rank whatever its trace's size,
    so its tables are not cached. Never found by a search: ``TorchNpuReader.light`` makes its runs."""

    name = "torch_npu (steps and communication)"
    cached = False

    def runs_at(self, path: Path) -> list[RunSource]:
        return []

    def sources(self, run: RunSource) -> list[Path]:
        from perfsight.ingest.ascend.torch_npu_text import sources

        return sources(run.path, CLUSTER_FILES)

    def read(self, run: RunSource) -> RunTables:
        from perfsight.ingest.ascend.torch_npu_text import read_torch_npu_text

        return read_torch_npu_text(run.path, files=CLUSTER_FILES)

    def light(self, run: RunSource) -> RunSource:
        return run


TORCH_NPU_LIGHT = TorchNpuLightReader()


class MsprofReader(Reader):
    """An msprof ``PROF_`` directory (without perfsight's manifest) holding exports, all its devices."""

    name = "msprof"
    siblings_are_ranks = True     # one PROF_ directory per rank's process

    def runs_at(self, path: Path) -> list[RunSource]:
        return [RunSource(self, path)] if is_msprof_dir(path) and not msprof_without_data(path) else []

    def without_data(self, path: Path) -> str | None:
        return msprof_without_data(path)

    def sources(self, run: RunSource) -> list[Path]:
        from perfsight.ingest.ascend.msprof_dir import msprof_sources

        return msprof_sources(run.path)

    def read(self, run: RunSource) -> RunTables:
        from perfsight.ingest.ascend.msprof_dir import read_msprof_dir

        return read_msprof_dir(run.path)


class MindSporeLegacyReader(Reader):
    """MindSpore's flat profiler folder: one run per rank whose files it holds; each rank's cache and
    exports go to a folder of its own inside it. A run without a rank is the folder's one rank, as
    ``read_mindspore_legacy`` reads it (``detect.rank_to_read``)."""

    name = "mindspore"

    def runs_at(self, path: Path) -> list[RunSource]:
        return [RunSource(self, path, rank) for rank in ranks_in(path)] if is_mindspore_legacy_dir(path) else []

    def sources(self, run: RunSource) -> list[Path]:
        from perfsight.ingest.ascend.mindspore_legacy import legacy_sources

        return legacy_sources(run.path, run.rank)

    def read(self, run: RunSource) -> RunTables:
        from perfsight.ingest.ascend.mindspore_legacy import read_mindspore_legacy

        return read_mindspore_legacy(run.path, rank=run.rank)

    def cache_dir(self, run: RunSource) -> Path:
        return run.path / f"{layout.CACHE_DIR}_rank{rank_to_read(run.path, run.rank)}"

    def output_dir(self, run: RunSource) -> Path:
        return run.path / layout.OUTPUT_DIR / f"rank{rank_to_read(run.path, run.rank)}"
