"""msprof-shaped export: ``perfsight export timeline|summary``.

    export(path, timeline=, summary=, ...)    every run at path exported (``perfsight.export``)
    export_run(run_dir, ...)                  one perfsight run into its perfsight_output/ (Profiler.analyse)
    find_export_runs(path)                    the runs ``-dir path`` exports (also runs/<job>/PROF_*)
    export_runs(runs, timeline=, summary=...) each run's files into its output folder, all or none
    select(tables, Selection(...))            the iterations asked for (--iteration-id/--model-id/--iteration-count)
    export_timeline(tables, out_dir, stamp=)  msprof_{stamp}.json, task_time_{stamp}.json, msprof_tx.json,
                                              step_trace_{stamp}.json
    export_summary(tables, out_dir, stamp=)   step_trace, op_summary, op_statistic, api_statistic, runtime_api,
                                              acl_statistic, task_time, msprof_tx, pytorch_operator_view (csv|json),
                                              prof_rule_0.json
    write_readme(out_dir, written)            README.txt describing every file written
    cluster(path, output=None)                msprof-analyze's cluster outputs: OUTPUT/cluster_analysis_output/
                                              (``perfsight cluster``, cluster_analysis.py)

Files without data are not written. catalog.py names and describes every file and column; output.py owns
how files land in a folder (checks, all-or-nothing writes, never overwriting a file perfsight did not write).
"""
from perfsight.options.export import STEP_MODEL_ID
from perfsight.views.export.cluster_analysis import cluster
from perfsight.views.export.readme import write_readme
from perfsight.views.export.runs import export, export_run, export_runs, find_export_runs
from perfsight.views.export.select import Selection, select
from perfsight.views.export.summary import export_summary
from perfsight.views.export.timeline import export_timeline

__all__ = ["STEP_MODEL_ID", "Selection", "select", "export_timeline", "export_summary", "write_readme",
           "export", "export_run", "export_runs", "find_export_runs", "cluster"]
