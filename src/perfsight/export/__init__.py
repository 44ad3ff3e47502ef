"""msprof-shaped export: ``perfsight export timeline|summary``.

    select(tables, Selection(...))            the iterations asked for (--iteration-id/--model-id/--iteration-count)
    export_timeline(tables, out_dir, stamp=)  msprof_{stamp}.json, step_trace_{stamp}.json
    export_summary(tables, out_dir, stamp=)   step_trace, op_summary, op_statistic, api_statistic, task_time (csv|json)
    write_readme(out_dir, written)            README.txt describing every file written

Files without data are not written. catalog.py names and describes every file and column.
"""
from .readme import write_readme
from .select import STEP_MODEL_ID, Selection, select
from .summary import export_summary
from .timeline import export_timeline

__all__ = ["STEP_MODEL_ID", "Selection", "select", "export_timeline", "export_summary", "write_readme"]
