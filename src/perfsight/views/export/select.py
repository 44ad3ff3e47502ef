"""Iteration selection: msprof export's ``--iteration-id``, ``--model-id`` and ``--iteration-count``.

The seed's rules: "--iteration-id 迭代ID。需配置为正整数。与--model-id必须同时配置。"; "--model-id=4294967295,
为Step模式,即--iteration-id配置的值以Step为粒度解析"; "--model-id配置为其他值时,为Graph模式,即--iteration-id
配置的值以Graph为粒度解析" ("每个Graph执行一次,Iteration ID加1"); "--iteration-count 导出迭代的个数".

perfsight maps them onto PyTorch:

* Step mode (model id 4294967295): iteration N is the training step numbered N, i.e. ``ProfilerStep#N``
  (the slices' ``step`` column), not the N-th step present in the trace; iterations N .. N+count-1 are
  kept: the slices of those steps (host work inside them and the device work they launched).
* Graph mode (any other model id): a model is a torch.compile graph, identified by the frame id of its
  ``Torch-Compiled Region: F/C`` slices (model id F; a recompile C of the same frame is the same model; a
  region named without ids is model 0). When the trace has no regions, the ``## Call CompiledFxGraph
  KEY ##`` slices are the graphs, numbered 0, 1, ... in order of first appearance. Iteration N is the
  N-th execution (1-based, per rank) of that graph: the execution slice, every slice on its track within
  it, and the device work launched from them (same correlation id, or a flow from a kept slice).
  Model ids are torch.compile frame ids, which start at 0, so model id 0 is accepted although the seed
  asks for positive integers.

Counters and memory samples are kept within the time span of the kept slices; flows whose two ends are
kept; tracks still referenced. Without iteration_id/model_id/iteration_count the tables pass unchanged.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.errors import OptionError
from perfsight.core.tables import RunTables, meta_table
from perfsight.options.export import STEP_MODEL_ID


@dataclass(frozen=True)
class Selection:
    """What to export: iterations ``iteration_id`` .. ``iteration_id + iteration_count - 1`` of model
    ``model_id`` (``STEP_MODEL_ID`` for training steps); all None = everything."""

    iteration_id: int | None = None
    model_id: int | None = None
    iteration_count: int | None = None

    def is_everything(self) -> bool:
        return self.iteration_id is None and self.model_id is None and self.iteration_count is None

    def iterations(self) -> range:
        return range(self.iteration_id, self.iteration_id + (self.iteration_count or 1))


def select(tables: RunTables, selection: Selection) -> RunTables:
    """The part of ``tables`` that ``selection`` asks for (see the module docstring); raises
    ``OptionError`` naming what exists when the selection is invalid or absent from the run."""
    if selection.is_everything():
        return tables
    _validate(selection)
    if selection.model_id == STEP_MODEL_ID:
        slice_ids = _step_slice_ids(tables, selection)
    else:
        slice_ids = _graph_slice_ids(tables, selection)
    return _restrict(tables, slice_ids, selection)


def _validate(selection: Selection) -> None:
    if selection.iteration_id is None or selection.model_id is None:
        raise OptionError("--iteration-id and --model-id must be given together (--iteration-count needs both); "
                          f"got iteration_id={selection.iteration_id}, model_id={selection.model_id}")
    for name, value, least in (("iteration-id", selection.iteration_id, 1), ("model-id", selection.model_id, 0),
                               ("iteration-count", selection.iteration_count, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            allowed = "a positive integer" if least else "an integer >= 0 (a torch.compile frame id) or 4294967295"
            raise OptionError(f"--{name}: {value!r} is not allowed; it must be {allowed}")


def _step_slice_ids(tables: RunTables, selection: Selection) -> pa.Array:
    con = tables.connect()
    present = [row[0] for row in con.sql(
        "SELECT DISTINCT step FROM slices WHERE kind = 'step' AND step IS NOT NULL ORDER BY step").fetchall()]
    if not present:
        raise OptionError(f"--model-id {STEP_MODEL_ID} selects training steps, but this run has no step "
                          "slices (ProfilerStep#N); export without --iteration-id/--model-id")
    missing = [n for n in selection.iterations() if n not in set(present)]
    if missing:
        raise OptionError(f"--iteration-id/--iteration-count select steps {_numbers(list(selection.iterations()))}; "
                          f"not in this run: {_numbers(missing)}. In step mode the iteration id is the N of "
                          f"ProfilerStep#N; steps present: {_numbers(present)}")
    wanted = pa.array(list(selection.iterations()), pa.int32())
    return tables.slices.filter(pc.is_in(tables.slices["step"], value_set=wanted))["id"].combine_chunks()


_GRAPH_EXECUTIONS_SQL = r"""
WITH regions AS (
    SELECT id, track_id, start_ns, start_ns + dur_ns AS end_ns,
           coalesce(try_cast(regexp_extract(name, '^Torch-Compiled Region: (\d+)/', 1) AS BIGINT), 0) AS model_id
    FROM slices WHERE name LIKE 'Torch-Compiled Region%'
), fx_calls AS (
    SELECT id, track_id, start_ns, start_ns + dur_ns AS end_ns,
           regexp_extract(name, '^## Call CompiledFxGraph (\S+)', 1) AS graph_key
    FROM slices WHERE name LIKE '## Call CompiledFxGraph %' AND NOT EXISTS (SELECT 1 FROM regions)
), fx_graphs AS (
    SELECT graph_key, row_number() OVER (ORDER BY min(start_ns), graph_key) - 1 AS model_id
    FROM fx_calls GROUP BY graph_key
), executions AS (
    SELECT id, track_id, start_ns, end_ns, model_id FROM regions
    UNION ALL
    SELECT id, track_id, start_ns, end_ns, model_id FROM fx_calls JOIN fx_graphs USING (graph_key)
)
SELECT e.*, coalesce(t.rank, 0) AS rank,
       row_number() OVER (PARTITION BY e.model_id, coalesce(t.rank, 0) ORDER BY e.start_ns, e.id) AS iteration
FROM executions e JOIN tracks t USING (track_id)
"""

_GRAPH_SLICES_SQL = """
WITH chosen AS (SELECT * FROM executions WHERE model_id = $model AND list_contains($iterations, iteration)),
inside AS (
    SELECT s.id, s.correlation_id, c.rank FROM slices s JOIN chosen c
      ON s.track_id = c.track_id AND s.start_ns >= c.start_ns AND s.start_ns + s.dur_ns <= c.end_ns
), launched AS (
    SELECT s.id FROM slices s JOIN tracks t USING (track_id)
    JOIN inside i ON s.correlation_id = i.correlation_id AND coalesce(t.rank, 0) = i.rank
    UNION
    SELECT f.dst_id FROM flows f JOIN inside i ON f.src_id = i.id
)
SELECT id FROM inside UNION SELECT id FROM launched ORDER BY id
"""


def _graph_slice_ids(tables: RunTables, selection: Selection) -> pa.Array:
    con = tables.connect()
    con.execute(f"CREATE TEMP TABLE executions AS {_GRAPH_EXECUTIONS_SQL}")
    runs = dict(con.sql("SELECT model_id, max(iteration) FROM executions GROUP BY model_id ORDER BY model_id")
                .fetchall())
    if not runs:
        raise OptionError(f"--model-id {selection.model_id}: this run has no compiled graphs (torch.compile "
                          f"'Torch-Compiled Region' slices); use --model-id {STEP_MODEL_ID} to select steps")
    existing = "; ".join(f"model {m}: iterations 1..{n}" for m, n in runs.items())
    if selection.model_id not in runs:
        raise OptionError(f"--model-id {selection.model_id} is not in this run; graphs present: {existing}")
    if selection.iterations().stop - 1 > runs[selection.model_id]:
        raise OptionError(f"--iteration-id/--iteration-count select iterations "
                          f"{_numbers(list(selection.iterations()))} of model {selection.model_id}, which ran "
                          f"{runs[selection.model_id]} time(s); graphs present: {existing}")
    params = {"model": selection.model_id, "iterations": list(selection.iterations())}
    return con.sql(_GRAPH_SLICES_SQL, params=params).to_arrow_table()["id"].combine_chunks()


def _restrict(tables: RunTables, slice_ids: pa.Array, selection: Selection) -> RunTables:
    """The tables cut down to ``slice_ids`` and what belongs to them."""
    slices = tables.slices.filter(pc.is_in(tables.slices["id"], value_set=slice_ids))
    flows = tables.flows.filter(pc.and_(pc.is_in(tables.flows["src_id"], value_set=slice_ids),
                                        pc.is_in(tables.flows["dst_id"], value_set=slice_ids)))
    if slices.num_rows:
        first = pc.min(slices["start_ns"]).as_py()
        last = pc.max(pc.add(slices["start_ns"], slices["dur_ns"])).as_py()
    else:
        first, last = 0, -1
    counters = _within(tables.counters, first, last)
    memory = _within(tables.memory, first, last)
    used_tracks = pa.concat_arrays([c["track_id"].combine_chunks().cast(pa.int32())
                                    for c in (slices, counters, memory)])
    tracks = tables.tracks.filter(pc.is_in(tables.tracks["track_id"], value_set=used_tracks))
    facts = tables.meta_dict()
    facts["selection"] = json.dumps({"iteration_id": selection.iteration_id, "model_id": selection.model_id,
                                     "iteration_count": selection.iteration_count or 1})
    return RunTables(slices=slices, tracks=tracks, counters=counters, flows=flows, memory=memory,
                     meta=meta_table(facts))


def _within(table: pa.Table, first: int, last: int) -> pa.Table:
    ts = table["ts_ns"]
    return table.filter(pc.and_(pc.greater_equal(ts, first), pc.less_equal(ts, last)))


def _numbers(values: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1..3, 7"``."""
    spans: list[list[int]] = []
    for v in sorted(values):
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in spans)
