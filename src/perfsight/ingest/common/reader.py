"""The interface every input format implements (``Reader``) and a run one reader found (``RunSource``).

A ``Reader`` is one format: it recognises its runs at a path (a file or a folder: ``runs_at``, cheap, as it
is asked of every entry of every folder searched), says the rank a run has before it is read (``rank``: it
groups runs into jobs), lists the raw files a run is read from (``sources``: the cache's fingerprint,
progress, insight's change detection), reads a run into the canonical tables (``read``), says where a
run's Parquet cache and its exports go (inside a run's folder, by default) and, for a format whose ranks
report their steps and communication in small files of their own (torch_npu's text output), gives the run
read from only those (``light``: ``perfsight cluster --light``, as msprof-analyze's cluster mode reads).
``perfsight.ingest.registry`` holds the one list of readers, in the order they are tried (the interface
lives apart from that list so that a format's module subclasses it without importing every other format);
docs/readers.md says how to add one.

A ``RunSource`` holds its reader: everything a run does (its sources, its tables, its cache and output
folders) is its reader's answer, so no caller asks which format a run is.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from perfsight.core import layout
from perfsight.core.tables import RunTables


class Reader(ABC):
    """One input format (module docstring); one instance of each is listed in ``registry.READERS``."""

    #: the format as insight's run list names it ("perfsight", "torch.profiler", "torch_npu", ...)
    name: ClassVar[str]
    #: what one run of the format is called in run lists ("run"; "trace" for a trace file)
    run_word: ClassVar[str] = "run"
    #: whether several runs of the format side by side in one folder are one job's ranks even though their
    #: ranks are only known once read (a format that writes one folder per rank and says the rank inside)
    siblings_are_ranks: ClassVar[bool] = False
    #: whether a run's tables are kept in a Parquet cache (a read cheaper than the cache's is not)
    cached: ClassVar[bool] = True

    @abstractmethod
    def runs_at(self, path: Path) -> list[RunSource]:
        """The runs ``path`` (a file or a folder) is, [] when it is not this format's. Looks at names, file
        types and at most the first bytes of a file: it is asked of every entry of every folder searched."""

    def rank(self, run: RunSource) -> int | None:
        """The rank ``run`` has as far as can be told before reading it; None when only its tables say."""
        return run.rank

    def without_data(self, path: Path) -> str | None:
        """For a folder that is this format's by its names but holds nothing it reads (no run at it): what the
        folder is and which files it lacks, for the error of opening it; None otherwise."""
        return None

    @abstractmethod
    def sources(self, run: RunSource) -> list[Path]:
        """The raw files the tables of ``run`` are read from."""

    def light(self, run: RunSource) -> RunSource:
        """``run`` read from only the files a cluster's cross-rank figures come from (its steps and
        communication as the profiler reported them: ``perfsight cluster --light``); ``run`` itself for a
        format that has no lighter read than its whole one."""
        return run

    @abstractmethod
    def read(self, run: RunSource) -> RunTables:
        """The canonical tables of ``run``; InputError for what is not readable, damage read around and said
        in meta ``parse_warnings``."""

    def cache_dir(self, run: RunSource) -> Path:
        """Where the Parquet cache of ``run`` goes: inside the run's folder."""
        return run.path / layout.CACHE_DIR

    def output_dir(self, run: RunSource) -> Path:
        """Where ``perfsight export`` writes the files of ``run`` by default: inside the run's folder."""
        return run.path / layout.OUTPUT_DIR

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclass(frozen=True)
class RunSource:
    """One run found on disk, by its reader: how to read it and where its cache and exports go."""

    reader: Reader
    path: Path                # the run folder, or the trace file
    rank: int | None = None   # which rank's files, when one folder holds several ranks' (MindSpore's flat folder)

    @property
    def cache_dir(self) -> Path:
        return self.reader.cache_dir(self)

    @property
    def default_output_dir(self) -> Path:
        return self.reader.output_dir(self)

    def sources(self) -> list[Path]:
        return self.reader.sources(self)

    def read(self) -> RunTables:
        return self.reader.read(self)
