"""Data preparation (MindSpore Insight's 数据准备性能分析): how long each step waits for its input, the
input queues where a source records them, and a verdict on whether training is input-bound.

**Per step** (``data_wait``), per rank:

* Steps are the host ``step`` slices (ProfilerStep#N) of the rank, as in ``steps.step_trace``:
  start = earliest start, end = latest end of the step-N slices on thread tracks.
* ``dataloader_ns``: the time inside the step covered by its ``dataloader`` slices (their union cut to
  the step: ``step_spans.DATA_WAIT_CTE``, as ``step_trace``'s ``data_wait_ns``); ``dataloader_count``: those
  not nested in another.
* perfsight runs also record, for every step the collector saw (profiled or not), the series
  ``host.step_number``, ``host.step_time_ns`` and ``host.data_wait_ns`` (one sample at each step's end;
  perfsight times the DataLoader's ``__next__``); the step number is the collector's, which numbers
  ProfilerStep#N too, so each sample joins its own step slice (an earlier match by overlap gave the
  profiled window's last step the first unprofiled step's sample as well, and lost that step).
* ``data_wait_ns`` is ``dataloader_ns`` when the step has dataloader slices (``source`` = ``dataloader``),
  else the host series' value (``host``), else 0 (``none``). ``step_ns`` is the step slice's span, else
  the host series' step time. ``wait_percent`` = 100 * data_wait_ns / step_ns.

**Queues** (``queue_sizes``, ``queue_summary``): counter series whose name contains ``queue`` (any case).
Following the seed, a series whose name contains ``host`` is a *host queue* (主机队列: batches the data
pipeline has prepared), any other a *data queue* (数据队列: batches waiting for the device). A sample of
0 means the consumer found the queue empty: "如果数据队列Size为0, 则训练会一直等待".

**Verdict** (``data_verdict``), per rank, with the thresholds in the returned table:

* wait metric: ``wait_percent`` over all steps = 100 * sum(data_wait_ns) / sum(step_ns).
* queue metric (when a data queue is recorded): ``data_queue_empty_percent``, the percent of the data
  queues' samples that are 0.
* each metric is *highly* input-bound at >= ``HIGHLY_PERCENT`` (30), *moderately* at
  >= ``MODERATELY_PERCENT`` (10), else *not*; the verdict is the worse of the two metrics, ``unknown``
  when the rank has neither steps nor queues. ``bottleneck_steps`` counts the steps whose own
  ``wait_percent`` reaches the moderate threshold (the overview's "可能存在瓶颈的step数目").
* The seed's queue rules add to the reasons: a host queue empty in >= MODERATELY_PERCENT of its samples
  means data processing is slow ("主机队列Size为0, 表示数据处理速度慢"); a host queue rarely empty while the
  data queue is often empty points at sending data to the device ("主机队列Size一直较大, 而数据队列的Size持续
  很小, 则数据发送有可能存在性能瓶颈").
"""
from __future__ import annotations

import pyarrow as pa

from perfsight.analysis.step_spans import DATA_WAIT_CTE, STEP_SPANS_CTE
from perfsight.core.memo import computed
from perfsight.core.tables import DATA_WAIT_SERIES, STEP_NUMBER_SERIES, STEP_TIME_SERIES, RunTables, new_connection

#: input-bound thresholds, percent of step time (or of queue samples that are empty)
HIGHLY_PERCENT = 30.0
MODERATELY_PERCENT = 10.0

DATA_WAIT = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("start_ns", pa.int64()),
    ("step_ns", pa.int64()),
    ("dataloader_ns", pa.int64()),
    ("dataloader_count", pa.int64()),
    ("host_data_wait_ns", pa.int64()),
    ("host_step_ns", pa.int64()),
    ("data_wait_ns", pa.int64()),
    ("wait_percent", pa.float64()),
    ("source", pa.string()),
])

QUEUE_SIZES = pa.schema([
    ("rank", pa.int32()),
    ("series", pa.string()),
    ("queue", pa.string()),
    ("ts_ns", pa.int64()),
    ("value", pa.float64()),
    ("step", pa.int32()),
])

QUEUE_SUMMARY = pa.schema([
    ("rank", pa.int32()),
    ("series", pa.string()),
    ("queue", pa.string()),
    ("samples", pa.int64()),
    ("mean", pa.float64()),
    ("min", pa.float64()),
    ("max", pa.float64()),
    ("empty_samples", pa.int64()),
    ("empty_percent", pa.float64()),
])

DATA_VERDICT = pa.schema([
    ("rank", pa.int32()),
    ("verdict", pa.string()),
    ("steps", pa.int64()),
    ("data_wait_ns", pa.int64()),
    ("step_ns", pa.int64()),
    ("wait_percent", pa.float64()),
    ("max_step_wait_percent", pa.float64()),
    ("bottleneck_steps", pa.int64()),
    ("data_queue_empty_percent", pa.float64()),
    ("host_queue_empty_percent", pa.float64()),
    ("highly_threshold_percent", pa.float64()),
    ("moderately_threshold_percent", pa.float64()),
    ("reason", pa.string()),
    ("suggestions", pa.string()),
])

_DATA_WAIT_SQL = f"""
WITH {STEP_SPANS_CTE}, {DATA_WAIT_CTE}, host_steps AS (
    SELECT coalesce(t.rank, 0)::INTEGER AS rank, c.ts_ns,
           max(c.value) FILTER (WHERE t.name = '{STEP_NUMBER_SERIES}')::INTEGER AS step,
           max(c.value) FILTER (WHERE t.name = '{STEP_TIME_SERIES}')::BIGINT AS step_ns,
           max(c.value) FILTER (WHERE t.name = '{DATA_WAIT_SERIES}')::BIGINT AS wait_ns
    FROM counters c JOIN tracks t USING (track_id)
    WHERE t.name IN ('{STEP_NUMBER_SERIES}', '{STEP_TIME_SERIES}', '{DATA_WAIT_SERIES}') GROUP BY ALL
), joined AS (
    SELECT coalesce(st.rank, h.rank) AS rank, coalesce(st.step, h.step) AS step,
           coalesce(st.start_ns, h.ts_ns - h.step_ns) AS start_ns,
           coalesce(st.end_ns - st.start_ns, h.step_ns) AS step_ns,
           l.wait_ns AS loader_ns, coalesce(l.loader_count, 0) AS loader_count, h.wait_ns, h.step_ns AS host_step_ns
    FROM steps st
    LEFT JOIN data_wait l USING (rank, step)
    FULL OUTER JOIN host_steps h ON h.rank = st.rank AND h.step = st.step
)
SELECT rank, step, start_ns, step_ns, coalesce(loader_ns, 0) AS dataloader_ns, loader_count AS dataloader_count,
       wait_ns AS host_data_wait_ns, host_step_ns,
       CASE WHEN loader_count > 0 THEN loader_ns ELSE coalesce(wait_ns, 0) END AS data_wait_ns,
       100.0 * (CASE WHEN loader_count > 0 THEN loader_ns ELSE coalesce(wait_ns, 0) END) / nullif(step_ns, 0)
           AS wait_percent,
       CASE WHEN loader_count > 0 THEN 'dataloader' WHEN wait_ns IS NOT NULL THEN 'host' ELSE 'none' END AS source
FROM joined ORDER BY rank, step
"""

_QUEUE_SIZES_SQL = f"""
WITH {STEP_SPANS_CTE}
SELECT coalesce(t.rank, 0)::INTEGER AS rank, t.name AS series,
       CASE WHEN t.name ILIKE '%host%' THEN 'host' ELSE 'data' END AS queue, c.ts_ns, c.value,
       (SELECT max(st.step) FROM steps st
        WHERE st.rank = coalesce(t.rank, 0) AND c.ts_ns >= st.start_ns AND c.ts_ns < st.end_ns) AS step
FROM counters c JOIN tracks t USING (track_id)
WHERE t.name ILIKE '%queue%'
ORDER BY rank, series, c.ts_ns
"""


def data_wait(tables: RunTables) -> pa.Table:
    """One row per (rank, step) with the step's data wait (schema ``DATA_WAIT``; the module docstring
    defines every column; times int64 ns, ``wait_percent`` in percent of ``step_ns``)."""
    return tables.sql(_DATA_WAIT_SQL).to_arrow_table().cast(DATA_WAIT)


def queue_sizes(tables: RunTables) -> pa.Table:
    """Every sample of a queue counter series (schema ``QUEUE_SIZES``): rank, series name, ``queue``
    (``host`` or ``data``, see the module docstring), ts_ns, value (the queue's size) and the step whose
    span holds the sample (null outside steps)."""
    return tables.sql(_QUEUE_SIZES_SQL).to_arrow_table().cast(QUEUE_SIZES)


def queue_summary(tables: RunTables) -> pa.Table:
    """Per rank and queue series (schema ``QUEUE_SUMMARY``): samples, mean, min, max, the samples that
    are 0 (``empty_samples``) and their percent of all samples (``empty_percent``)."""

    con = new_connection()
    con.register("q", computed(queue_sizes, tables))
    query = """
        SELECT rank, series, queue, count(*) AS samples, avg(value) AS mean, min(value) AS min, max(value) AS max,
               count(*) FILTER (WHERE value = 0) AS empty_samples,
               100.0 * count(*) FILTER (WHERE value = 0) / count(*) AS empty_percent
        FROM q GROUP BY ALL ORDER BY rank, series
    """
    return con.sql(query).to_arrow_table().cast(QUEUE_SUMMARY)


def _level(percent: float | None) -> int:
    """0 not, 1 moderately, 2 highly input-bound (None: not measured -> 0)."""
    if percent is None:
        return 0
    return 2 if percent >= HIGHLY_PERCENT else 1 if percent >= MODERATELY_PERCENT else 0


_VERDICTS = ("not", "moderately", "highly")

_SUGGESTIONS = {
    "highly": "Input loading dominates the step. Use more DataLoader workers (num_workers), "
              "persistent_workers=True and a larger prefetch_factor; pin_memory=True with non_blocking copies; "
              "move heavy preprocessing off the training loop (cache decoded samples, transform on the device). "
              "Check host CPU utilisation: low user CPU means more worker threads can help, high system CPU "
              "means fewer.",
    "moderately": "Input loading takes a noticeable share of the step. Try more DataLoader workers, "
                  "prefetching (prefetch_factor, persistent_workers) and pin_memory=True.",
    "not": "Input loading is not a bottleneck; look at compute and communication instead.",
    "unknown": "No steps or input queues were recorded; profile with steps (prof.step()) and a DataLoader.",
}


def _fmt(percent: float | None) -> str:
    return "n/a" if percent is None else f"{percent:.1f}%"


def data_verdict(tables: RunTables) -> pa.Table:
    """One row per rank (schema ``DATA_VERDICT``): ``verdict`` (``highly``, ``moderately``, ``not`` or
    ``unknown`` input-bound) from the metrics and thresholds of the module docstring, the metrics
    themselves, the thresholds used (``highly_threshold_percent``, ``moderately_threshold_percent``), a
    ``reason`` and ``suggestions`` text."""

    con = new_connection()
    con.register("w", computed(data_wait, tables))
    con.register("q", computed(queue_summary, tables))
    steps = {r[0]: r[1:] for r in con.execute(f"""
        SELECT rank, count(*), sum(data_wait_ns)::BIGINT, sum(step_ns)::BIGINT,
               100.0 * sum(data_wait_ns) / nullif(sum(step_ns), 0), max(wait_percent),
               count(*) FILTER (WHERE wait_percent >= {MODERATELY_PERCENT})
        FROM w GROUP BY rank""").fetchall()}
    queues = {(r[0], r[1]): r[2] for r in con.execute("""
        SELECT rank, queue, 100.0 * sum(empty_samples) / sum(samples) FROM q GROUP BY ALL""").fetchall()}
    rows = []
    for rank in sorted(set(steps) | {rank for rank, _ in queues}):
        n, wait_ns, step_ns, wait_pct, max_pct, bottleneck = steps.get(rank, (0, None, None, None, None, 0))
        data_q, host_q = queues.get((rank, "data")), queues.get((rank, "host"))
        if not n and data_q is None and host_q is None:
            verdict, reasons = "unknown", ["no steps and no queue series"]
        else:
            verdict = _VERDICTS[max(_level(wait_pct), _level(data_q))]
            reasons = [f"data wait is {_fmt(wait_pct)} of step time over {n} steps "
                       f"({bottleneck} steps >= {MODERATELY_PERCENT:g}%)"]
            if data_q is not None:
                reasons.append(f"the data queue was empty in {_fmt(data_q)} of its samples")
        if host_q is not None:
            if host_q >= MODERATELY_PERCENT:
                reasons.append(f"the host queue was empty in {_fmt(host_q)} of its samples: data processing is slow")
            elif data_q is not None and data_q >= MODERATELY_PERCENT:
                reasons.append("the host queue stays filled while the data queue runs empty: sending data to "
                               "the device may be the bottleneck")
        rows.append({
            "rank": rank, "verdict": verdict, "steps": n, "data_wait_ns": wait_ns, "step_ns": step_ns,
            "wait_percent": wait_pct, "max_step_wait_percent": max_pct, "bottleneck_steps": bottleneck,
            "data_queue_empty_percent": data_q, "host_queue_empty_percent": host_q,
            "highly_threshold_percent": HIGHLY_PERCENT, "moderately_threshold_percent": MODERATELY_PERCENT,
            "reason": "; ".join(reasons), "suggestions": _SUGGESTIONS[verdict],
        })
    return pa.Table.from_pylist(rows, schema=DATA_VERDICT)
