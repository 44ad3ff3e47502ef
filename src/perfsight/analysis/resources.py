"""Resource utilisation (MindSpore Insight's 资源利用 page): the host's CPU and memory series over time and
their summary.

perfsight's collector samples (docs/tables.md) ``host.cpu_percent.process`` and
``host.cpu_percent.system`` (percent of one core x cores, as psutil: a process busy on two cores shows
200), ``host.memory_rss_bytes.process``, ``host.memory_used_bytes.system`` and
``host.memory_percent.system``. Insight uses them "辅助性能调试": the process series against the system
series tells whether other processes compete with training ("整机利用率和进程利用率结合, 可以确定训练过程中
是否有其他进程影响训练").
"""
from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

#: the host usage series perfsight records, and their units
HOST_USAGE_SERIES = {
    "host.cpu_percent.process": "percent",
    "host.cpu_percent.system": "percent",
    "host.memory_rss_bytes.process": "bytes",
    "host.memory_used_bytes.system": "bytes",
    "host.memory_percent.system": "percent",
}

HOST_USAGE = pa.schema([
    ("rank", pa.int32()),
    ("series", pa.string()),
    ("ts_ns", pa.int64()),
    ("value", pa.float64()),
])

HOST_USAGE_SUMMARY = pa.schema([
    ("rank", pa.int32()),
    ("series", pa.string()),
    ("unit", pa.string()),
    ("samples", pa.int64()),
    ("first_ts_ns", pa.int64()),
    ("last_ts_ns", pa.int64()),
    ("mean", pa.float64()),
    ("min", pa.float64()),
    ("max", pa.float64()),
    ("p95", pa.float64()),
])


def host_usage(tables: RunTables, *, series: Sequence[str] | None = None) -> pa.Table:
    """Every sample of the host usage series, tidy (schema ``HOST_USAGE``: rank, series, ts_ns, value),
    ordered by rank, series, time. ``series`` picks series by exact name (any counter series, e.g.
    ``host.data_wait_ns``); by default the five of ``HOST_USAGE_SERIES`` present in the run."""
    names = list(series) if series is not None else list(HOST_USAGE_SERIES)
    query = """
        SELECT coalesce(t.rank, 0)::INTEGER AS rank, t.name AS series, c.ts_ns, c.value
        FROM counters c JOIN tracks t USING (track_id)
        WHERE t.kind = 'counter' AND list_contains($names, t.name)
        ORDER BY rank, series, c.ts_ns
    """
    return tables.sql(query, params={"names": names}).to_arrow_table().cast(HOST_USAGE)


def host_usage_summary(tables: RunTables, *, series: Sequence[str] | None = None) -> pa.Table:
    """Per rank and series of ``host_usage(tables, series=series)`` (schema ``HOST_USAGE_SUMMARY``): the
    ``unit`` (``percent``, ``bytes``, or null for a series not in ``HOST_USAGE_SERIES``), sample count,
    first and last sample time, mean, min, max and ``p95`` (the 95th percentile, linearly interpolated
    between samples as numpy.percentile does). Null samples are ignored."""

    con = new_connection()
    con.register("u", computed(host_usage, tables, series=series))
    units = pa.table({"series": list(HOST_USAGE_SERIES), "unit": list(HOST_USAGE_SERIES.values())})
    con.register("units", units)
    query = """
        SELECT u.rank, u.series, any_value(units.unit) AS unit, count(u.value) AS samples,
               min(u.ts_ns) AS first_ts_ns, max(u.ts_ns) AS last_ts_ns,
               avg(u.value) AS mean, min(u.value) AS min, max(u.value) AS max,
               quantile_cont(u.value, 0.95) AS p95
        FROM u LEFT JOIN units USING (series) GROUP BY u.rank, u.series ORDER BY u.rank, u.series
    """
    return con.sql(query).to_arrow_table().cast(HOST_USAGE_SUMMARY)

