"""A job as its ranks' summaries: the small per-rank tables every cross-rank analysis reads, whether they were
computed in this process from a run's tables or read from the Parquet files a cluster map wrote.

A cross-rank figure (a collective's wait, the clock offsets, the matrix, the slow rank and link, the step trace
of every rank) needs from each rank only a summary of it: its communication operations, the links and matrix
its files reported, its step breakdown and step trace, its facts. ``Job`` holds those tables under their
summary names (``analysis/job_summaries.py`` says which analysis makes each) as DuckDB views: Arrow tables
in memory (``Job.of_tables``: a run opened whole, ``perfsight.open``), or Parquet files (``Job.of_parquet``:
the store of ``perfsight cluster``, out of core, one file per rank and summary), so the same queries give
the same figures either way. A Job has its own result memo (``core.memo``): ``computed(fn, job)`` is each
cross-rank analysis once per job.

Ranks read alone cannot map the group-local ranks of a group no metadata maps (Ascend's groups without a
``parallel_group_info`` entry): a job read whole maps them when its ranks are merged
(``ingest/common/job_groups``); a job of stored summaries is given the same places (``places``: group,
group-local rank, global rank, from ``job_groups.places`` over the ranks' facts) and its ``operations`` and
``reported_matrix`` views apply them (``_PLACED_SQL``) as the merge does: an operation of a group all of whose
members have a place gets the global ranks (group ranks, source and destination, and the peer from them),
a matrix link both of whose ends have a place becomes global.

``EXACT_MEDIAN`` is ``breakdown.median`` as a DuckDB macro (``exact_median(list)``), defined on every Job
connection: the middle value, or the mean of the middle two, so a median is the same number in SQL and Python.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from perfsight.core.memo import Memo
from perfsight.core.tables import new_connection

#: breakdown.median in SQL: the middle value of a list, the mean of the middle two for an even count
EXACT_MEDIAN = """CREATE OR REPLACE TEMP MACRO exact_median(values_list) AS (
    CASE WHEN len(values_list) = 0 THEN NULL
         WHEN len(values_list) % 2 = 1 THEN list_sort(values_list)[(len(values_list) + 1) // 2]::DOUBLE
         ELSE (list_sort(values_list)[len(values_list) // 2]::DOUBLE
               + list_sort(values_list)[len(values_list) // 2 + 1]::DOUBLE) / 2 END)"""


#: the views that apply a job's places to the stored summaries (module docstring)
_PLACED_SQL = {
    "operations": """
        WITH places AS (SELECT process_group, map(list(local_rank), list(global_rank)) AS place FROM job_places
                        GROUP BY ALL),
        mapped AS (
            SELECT o.* REPLACE (
                       list_sort(list_transform(o.group_ranks, lambda r: p.place[r])) AS group_ranks,
                       true AS ranks_global,
                       coalesce(p.place[o.src_rank], o.src_rank) AS src_rank,
                       coalesce(p.place[o.dst_rank], o.dst_rank) AS dst_rank)
            FROM operations_stored o JOIN places p USING (process_group)
            WHERE NOT o.ranks_global AND len(o.group_ranks) > 0
              AND list_has_all(map_keys(p.place), o.group_ranks))
        SELECT * REPLACE (CASE WHEN dst_rank >= 0 AND dst_rank <> rank THEN dst_rank
                               WHEN src_rank >= 0 AND src_rank <> rank THEN src_rank END AS peer) FROM mapped
        UNION ALL BY NAME
        SELECT o.* FROM operations_stored o ANTI JOIN mapped m USING (rank, slice_id)""",
    "reported_matrix": """
        SELECT m.* REPLACE (
                   CASE WHEN s.global_rank IS NOT NULL AND d.global_rank IS NOT NULL THEN s.global_rank
                        ELSE m.src_rank END AS src_rank,
                   CASE WHEN s.global_rank IS NOT NULL AND d.global_rank IS NOT NULL THEN d.global_rank
                        ELSE m.dst_rank END AS dst_rank,
                   m.ranks_global OR (s.global_rank IS NOT NULL AND d.global_rank IS NOT NULL) AS ranks_global)
        FROM reported_matrix_stored m
        LEFT JOIN job_places s
               ON NOT m.ranks_global AND s.process_group = m.process_group AND s.local_rank = m.src_rank
        LEFT JOIN job_places d
               ON NOT m.ranks_global AND d.process_group = m.process_group AND d.local_rank = m.dst_rank""",
}

#: the places of a job's group-local ranks (``Job.places``)
PLACES = pa.schema([("process_group", pa.string()), ("local_rank", pa.int32()), ("global_rank", pa.int32())])


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


class Job:
    """A job's per-rank summary tables by name, each an Arrow table or the Parquet files holding it."""

    def __init__(self, tables: dict[str, pa.Table], files: dict[str, list[Path]] | None = None,
                 places: pa.Table | None = None):
        self.tables, self.files = tables, files or {}
        self.places = places if places is not None and places.num_rows else None
        self.memo = Memo()

    @classmethod
    def of_tables(cls, tables: dict[str, pa.Table]) -> Job:
        """A job whose summaries are in memory."""
        return cls(tables)

    @classmethod
    def of_parquet(cls, files: dict[str, list[Path]], schemas: dict[str, pa.Schema],
                   places: pa.Table | None = None) -> Job:
        """A job whose summaries are Parquet files (``files``: name -> the ranks' files; a name without files
        is an empty table of its schema), with the ``places`` of its group-local ranks (schema ``PLACES``)."""
        return cls({name: schema.empty_table() for name, schema in schemas.items() if not files.get(name)},
                   {name: paths for name, paths in files.items() if paths}, places)

    def connect(self):
        """A new DuckDB connection with a view per summary (and ``exact_median``)."""
        con = new_connection()
        placed = self.places is not None
        stored = {name: f"{name}_stored" if placed and name in _PLACED_SQL else name
                  for name in [*self.tables, *self.files]}
        for name, table in self.tables.items():
            con.register(stored[name], table)
        for name, paths in self.files.items():
            listed = ", ".join(_quoted(path) for path in paths)
            con.execute(f'CREATE OR REPLACE TEMP VIEW "{stored[name]}" AS SELECT * FROM read_parquet([{listed}])')
        if placed:
            con.register("job_places", self.places)
            for name, query in _PLACED_SQL.items():
                con.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS {query}')
        con.execute(EXACT_MEDIAN)
        return con

    def sql(self, query: str, **params) -> pa.Table:
        """``query`` over the summaries, as an Arrow table."""
        return self.connect().sql(query, params=params or None).to_arrow_table()
