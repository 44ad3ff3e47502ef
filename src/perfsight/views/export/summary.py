"""Summary export: step_trace, op_summary, op_statistic, api_statistic, runtime_api, acl_statistic,
task_time, msprof_tx and pytorch_operator_view as CSV or JSON, and the advisor's prof_rule_0.json.

Each file is one analysis result (from the run's memo, ``core.memo``) written by the one writer
(writer.write_rows) with the columns of its catalog entry (rows that are slices get their msprof fields from
``fields``); a result without rows is not written
("如果实际的性能数据没有相关的数据文件,就不会导出对应的timeline和summary数据"), except prof_rule_0.json: it has
one fixed name, so it is written for every run with data, as an empty list when nothing crossed a threshold,
and never keeps an earlier export's advice.
"""
from __future__ import annotations

from pathlib import Path

from perfsight.analysis import advisor, ops, steps
from perfsight.analysis.operator_details import operator_details
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables
from perfsight.options.export import check_export_format
from perfsight.views.export import catalog
from perfsight.views.export.fields import with_msprof_api_names, with_msprof_fields
from perfsight.views.export.output import Staging, staging
from perfsight.views.export.writer import write_rows


def export_summary(tables: RunTables, out_dir: Path, *, stamp: str, fmt: str = "csv",
                   fp_point: str | None = None, bp_point: str | None = None) -> list[Path]:
    """Write the summary files that have data into ``out_dir`` in ``fmt`` (csv or json), all or none;
    returns their paths. ``fp_point``/``bp_point`` name the step trace's forward-start / backward-end
    operators."""
    check_export_format(fmt)
    with staging(out_dir) as stage:
        stage_summary(tables, stage, stamp=stamp, fmt=fmt, fp_point=fp_point, bp_point=bp_point)
        return stage.commit()


def stage_summary(tables: RunTables, stage: Staging, *, stamp: str, fmt: str = "csv",
                  fp_point: str | None = None, bp_point: str | None = None) -> None:
    """Write the summary files that have data into ``stage`` (``export_summary`` without the commit)."""
    check_export_format(fmt)
    per_thread_calls = computed(ops.api_statistic, tables, by=("name", "pid", "tid"))
    results = (
        (catalog.STEP_TRACE_SUMMARY, computed(steps.step_trace, tables, fp_point=fp_point, bp_point=bp_point)),
        (catalog.OP_SUMMARY, with_msprof_fields(tables, computed(ops.op_instances, tables))),
        (catalog.OP_STATISTIC, computed(ops.op_statistic, tables, by=["op_type", "device"])),
        (catalog.API_STATISTIC, with_msprof_api_names(computed(ops.api_statistic, tables))),
        (catalog.RUNTIME_API, per_thread_calls),
        (catalog.ACL_STATISTIC, per_thread_calls),
        (catalog.TASK_TIME, with_msprof_fields(tables, computed(ops.task_time, tables))),
        (catalog.MSPROF_TX_SUMMARY,
         with_msprof_fields(tables, computed(ops.op_instances, tables, kinds=catalog.MARK_KINDS))),
        (catalog.PYTORCH_OPERATOR_VIEW, computed(operator_details, tables)),
    )
    written = False
    for kind, table in results:
        if table.num_rows:
            stage.write(kind.name(stamp, fmt), _rows_writer(table, kind.columns, fmt), replaceable=not kind.stamped)
            written = True
    if written:  # the advice of a run with data, even none: an earlier export's prof_rule_0.json must not stay
        stage.write(catalog.ADVICE.name(stamp, "json"), _rows_writer(computed(advisor.advise, tables),
                                                                     catalog.ADVICE.columns, "json"), replaceable=True)


def _rows_writer(table, columns, fmt: str):
    return lambda path: write_rows(table, columns, path, fmt)

