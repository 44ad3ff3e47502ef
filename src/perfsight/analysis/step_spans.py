"""SQL shared by analyses that place things in steps: the span of every (rank, step) and its data wait.

``STEP_SPANS_CTE`` is a common table expression named ``steps`` over the canonical tables, one row per
rank and step number N: ``rank`` (int32, 0 when unknown), ``step``, ``start_ns`` = earliest start and
``end_ns`` = latest end of the host ``step`` slices (ProfilerStep#N) of that rank on thread tracks, as
``steps.step_trace`` defines a step. Use it as ``WITH {STEP_SPANS_CTE}, ...``.

``DATA_WAIT_CTE`` (after a ``steps`` CTE with those columns) is named ``data_wait``: per rank and step,
``wait_ns`` = the time inside the step covered by its host ``dataloader`` slices (their union cut to the
step's span: loaders on several threads, or one running past the step end, never count twice nor
outside it), ``loader_count`` = how many of them are not nested in another, and ``last_end`` = the end of
the last one (cut to the step end).
"""

STEP_SPANS_CTE = """steps AS (
    SELECT coalesce(t.rank, 0)::INTEGER AS rank, s.step, min(s.start_ns) AS start_ns,
           max(s.start_ns + s.dur_ns) AS end_ns
    FROM slices s JOIN tracks t USING (track_id)
    WHERE s.kind = 'step' AND s.step IS NOT NULL AND t.kind = 'thread' GROUP BY ALL
)"""


DATA_WAIT_CTE = """loader_spans AS (
    SELECT coalesce(t.rank, 0)::INTEGER AS rank, d.step, greatest(d.start_ns, st.start_ns) AS start_ns,
           least(d.start_ns + d.dur_ns, st.end_ns) AS end_ns, p.kind IS DISTINCT FROM 'dataloader' AS outermost
    FROM slices d JOIN tracks t USING (track_id)
    JOIN steps st ON st.rank = coalesce(t.rank, 0) AND st.step = d.step
    LEFT JOIN slices p ON p.id = d.parent_id
    WHERE d.kind = 'dataloader' AND t.kind = 'thread'
), loader_union AS (  -- each span with the latest end of the spans before it: what it adds to the union
    SELECT *, max(end_ns) OVER (PARTITION BY rank, step ORDER BY start_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered_until
    FROM loader_spans WHERE end_ns >= start_ns
), data_wait AS (
    SELECT rank, step, sum(greatest(0, end_ns - greatest(start_ns, coalesce(covered_until, start_ns))))::BIGINT
           AS wait_ns, count(*) FILTER (WHERE outermost) AS loader_count, max(end_ns) AS last_end
    FROM loader_union GROUP BY ALL
)"""
