"""SQL shared by analyses that place things in steps: the span of every (rank, step).

``STEP_SPANS_CTE`` is a common table expression named ``steps`` over the canonical tables, one row per
rank and step number N: ``rank`` (int32, 0 when unknown), ``step``, ``start_ns`` = earliest start and
``end_ns`` = latest end of the host ``step`` slices (ProfilerStep#N) of that rank on thread tracks, as
``steps.step_trace`` defines a step. Use it as ``WITH {STEP_SPANS_CTE}, ...``.
"""

STEP_SPANS_CTE = """steps AS (
    SELECT coalesce(t.rank, 0)::INTEGER AS rank, s.step, min(s.start_ns) AS start_ns,
           max(s.start_ns + s.dur_ns) AS end_ns
    FROM slices s JOIN tracks t USING (track_id)
    WHERE s.kind = 'step' AND s.step IS NOT NULL AND t.kind = 'thread' GROUP BY ALL
)"""
