"""Every perfsight option, defined once, with its aliases from each seed vocabulary.

Users switch profiling on with keys from any of four vocabularies, freely mixed:

- ``PROFILING_OPTIONS`` (seed 000, Ascend's variable): ``output``, ``task_trace``, ``aic_metrics``, ...
- ``MS_PROFILER_OPTIONS`` (seed 002, MindSpore): ``output_path``, ``op_time``, ``aicore_metrics``, ...
- ``profileConfig`` (seed 001, torch_npu's E2E profiling): ``ACL_PROF_TASK_TIME``, ``TORCH_CALL_STACK``, ...
- ``perfsight`` (our own scheduling and collection keys): ``steps``, ``warmup_steps``, ``record_shapes``, ...

:data:`SPECS` is the one table: each :class:`OptionSpec` holds the canonical name, the aliases (each with
its vocabulary and, where the alias speaks another type, its own :class:`Kind` that parses straight to the
canonical value: MindSpore ``op_time: true`` is ``task_time: "l1"``), the type, the default, a help line
and the hardware the option needs. :data:`RULES` holds the cross-key rules of the seeds. :func:`resolve`
checks everything up front and either returns frozen :class:`Options` or raises one
:class:`~perfsight.core.errors.OptionError` that lists every problem, each naming the key as given, the value
and what is allowed.

Judgement calls (the seeds leave them open):

- Defaults follow PROFILING_OPTIONS and, for its own keys, MS_PROFILER_OPTIONS. Where the two differ
  (``start``, ``output``, ``aic_metrics``), options read from MS_PROFILER_OPTIONS get MindSpore's defaults
  (``OptionSpec.by_source``). torch_npu's profileConfig defaults (most switches True) apply to nobody: a
  user gets them by passing the keys.
- "task_trace on needs training_trace on" (seed 000, training mode) and "training_trace must be on for
  forward/backward operator data" are enforced only when both keys are given explicitly: a PyTorch run is
  not known to be training, and task_time is on by default. The first applies to the key the seed names,
  task_trace (any of on/l0/l1), not to task_time (our canonical name, which resolved options are written
  back with) nor to ACL_PROF_TASK_TIME (seed 001's own example pairs it with ACL_PROF_TRAINING_TRACE=False).
- Rules between keys (op_time requirements, instr_profiling_freq exclusions) fire on keys given explicitly
  and switched on; a default never trips a rule and is never reported as not collected.
- ``ACL_PROF_AICORE_METRICS=False`` switches AI Core metrics off whatever ``aiCoreMetricsType`` says
  (seed 001: the metric type is only effective when it is True); True has no opinion of its own.
- ``aicore_metrics`` and ``aiCoreMetricsType`` share one number table: 0-5 as in seed 001, -1 (MindSpore)
  or 0xFF (seed 001) for none.
- Values are case-sensitive, as in the seeds. A value of None (JSON null) counts as not given.

The package: ``kinds`` (value types), ``specs`` (the table and the rules), ``resolve`` (the resolver).
"""
from perfsight.core.errors import OptionError
from perfsight.options.resolve import (
           Options,
           describe,
           from_env,
           load_json_object,
           resolve,
)
from perfsight.options.specs import ENV_VARIABLES, RULES, SPECS, CollectEnvironment

__all__ = ["ENV_VARIABLES", "RULES", "SPECS", "CollectEnvironment", "OptionError", "Options", "describe", "from_env",
           "load_json_object", "resolve"]
