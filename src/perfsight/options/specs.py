"""The option table (``SPECS``: every option once, with its aliases from each vocabulary, kind, default,
help and the hardware it needs) and the rules between keys (``RULES``)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from perfsight.options.kinds import (
    Kind,
    aic_metrics,
    boolean,
    choice,
    comma_set,
    int_range,
    level,
    one_of,
    path,
    shown,
    step_range,
    switch,
    text,
    trigger,
)

#: where options can come from; the environment variables are read by ``resolve.from_env`` in this order
ENV_VARIABLES = ("PERFSIGHT_OPTIONS", "PROFILING_OPTIONS", "MS_PROFILER_OPTIONS")
SOURCES = ("api", "cli", *ENV_VARIABLES)

#: the vocabularies: Ascend's PROFILING_OPTIONS, MindSpore's MS_PROFILER_OPTIONS, torch_npu's profileConfig, ours
PO, MS, PC, PS = "PROFILING_OPTIONS", "MS_PROFILER_OPTIONS", "profileConfig", "perfsight"

# --- hardware an option needs ---------------------------------------------------------------------


@dataclass(frozen=True)
class CollectEnvironment:
    """What the machine of a run offers."""

    has_cuda: bool
    is_ascend: bool = False
    world_size: int = 1


@dataclass(frozen=True)
class Hardware:
    name: str
    what: str                                         # "needs <what>"
    present: Callable[[CollectEnvironment], bool]
    missing: str                                      # why it is absent, in words


def _ascend(name: str, what: str) -> Hardware:
    return Hardware(name, f"{what} of an Ascend NPU", lambda env: env.is_ascend, "this run has no Ascend NPU")


_AICORE = _ascend("ascend_aicore", "the AI Core registers")
_RANKS = Hardware("distributed", "more than one rank", lambda env: env.world_size > 1,
                  "this run has a single rank (seed 002: the setting has no effect on a single device)")
_ACCELERATOR = Hardware("accelerator", "a GPU or NPU (runtime API calls)",
                        lambda env: env.has_cuda or env.is_ascend, "this run is CPU only")
_CUDA = Hardware("cuda", "a CUDA GPU", lambda env: env.has_cuda, "this run has none, so it profiles the CPU")


# --- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alias:
    """A key that names an option in one vocabulary."""

    name: str
    vocabulary: str
    kind: Kind | None = None  # its own type, parsing to the canonical value; None: the option's type
    overrides: bool = False   # its value wins over the other keys' instead of conflicting with them


@dataclass(frozen=True)
class Derived:
    """A default computed from options resolved before it in :data:`SPECS`."""

    text: str
    compute: Callable[[Mapping[str, object]], object]


@dataclass(frozen=True)
class OptionSpec:
    name: str
    kind: Kind
    default: object
    help: str
    aliases: tuple[Alias, ...] = ()  # the canonical name is added as a "perfsight" key unless listed
    needs: Hardware | None = None
    by_source: Mapping[str, object] = field(default_factory=dict)  # defaults that differ per source

    def __post_init__(self):
        if self.name not in (alias.name for alias in self.aliases):
            object.__setattr__(self, "aliases", (Alias(self.name, PS), *self.aliases))


def _po(name: str) -> Alias:
    return Alias(name, PO)


def _ms(name: str, kind: Kind | None = None) -> Alias:
    return Alias(name, MS, kind)


def _pc(name: str, kind: Kind, overrides: bool = False) -> Alias:
    return Alias(name, PC, kind, overrides)


def _hz(high: int) -> Kind:
    return int_range(1, high, "Hz")


_SWITCH, _BOOL, _ON_OFF, _OP_TIME = switch(), boolean(), boolean("on", "off"), boolean("l1", "off")
_METRIC_NUMBER = choice(
    {0: "ArithmeticUtilization", 1: "PipeUtilization", 2: "Memory", 3: "MemoryL0", 4: "ResourceConflictRatio",
     5: "MemoryUB", -1: "none", 0xFF: "none"},
    "0 (ArithmeticUtilization), 1 (PipeUtilization), 2 (Memory), 3 (MemoryL0), 4 (ResourceConflictRatio),"
    " 5 (MemoryUB), -1 or 255 = 0xFF (none)", name="integer")
_AT_L1 = Derived("true when task_time is l1, else false", lambda values: values["task_time"] == "l1")
_HOST = comma_set("cpu", "mem")
_FP_BP = 'an operator name, or "" to find it automatically'
_ON_DEMAND = Derived("true when a trigger is set, else false", lambda values: values["trigger"] is not None)

SPECS: tuple[OptionSpec, ...] = (
    OptionSpec("output", path(), None, "directory for the run directories; a relative path resolves against "
               "the working directory (unset: PERFSIGHT_WORK_PATH, else ./perfsight_data)",
               (_po("output"), _ms("output_path"), Alias("profiler_result_path", PC)), by_source={MS: "./data"}),
    OptionSpec("storage_limit", int_range(200, 4294967295, "MB", suffix=True), None,
               "most MB of perfsight runs the output directory may hold; their oldest trace windows age out "
               "first, never a file perfsight did not write (unset: 90% of free disk)",
               (_po("storage_limit"),)),
    OptionSpec("start", _BOOL, True, "collect from the start; false waits for Profiler.start()",
               (_ms("start"),), by_source={MS: False}),
    OptionSpec("training_trace", _SWITCH, "off", "step trace: each step split into forward/backward, "
               "gradient sync and update", (_po("training_trace"), _pc("ACL_PROF_TRAINING_TRACE", _ON_OFF))),
    OptionSpec("task_time", level(), "l1", "operators: l1 = timing plus shapes and dtypes, l0 = timing only "
               "(cheaper), off = none",
               (_po("task_trace"), _po("task_time"), _ms("op_time", _OP_TIME), _pc("ACL_PROF_TASK_TIME", _OP_TIME))),
    OptionSpec("hccl", _SWITCH, "off", "communication operators (torch.distributed collectives)",
               (_po("hccl"), _ms("profile_communication", _ON_OFF), _pc("ACL_PROF_HCCL_TRACE", _ON_OFF)),
               needs=_RANKS),
    OptionSpec("aicpu", replace(_SWITCH, fallback="off"), "off", "AI CPU operator details",
               (_po("aicpu"), _pc("ACL_PROF_AICPU", _ON_OFF)), needs=_ascend("ascend_aicpu", "the AI CPU")),
    OptionSpec("fp_point", text(_FP_BP), "", "the first forward operator of a step (\"\": found automatically)",
               (_po("fp_point"),)),
    OptionSpec("bp_point", text(_FP_BP), "", "the last backward operator of a step (\"\": found automatically)",
               (_po("bp_point"),)),
    OptionSpec("aic_metrics", aic_metrics(), "PipeUtilization", "AI Core / AI Vector Core counter group, "
               "or Custom: registers",
               (_po("aic_metrics"), _ms("aicore_metrics", _METRIC_NUMBER), _pc("aiCoreMetricsType", _METRIC_NUMBER),
                _pc("ACL_PROF_AICORE_METRICS", boolean(None, "none"), overrides=True)),
               needs=_AICORE, by_source={MS: "ArithmeticUtilization"}),
    OptionSpec("l2", _SWITCH, "off", "L2 cache sampling",
               (_po("l2"), _ms("l2_cache", _ON_OFF), _pc("ACL_PROF_L2CACHE", _ON_OFF)),
               needs=_ascend("ascend_l2", "the L2 cache counters")),
    OptionSpec("msproftx", _SWITCH, "off", "user ranges marked with perfsight.mark()", (_po("msproftx"),)),
    OptionSpec("runtime_api", _SWITCH, "off", "runtime API calls (the CUDA runtime on a GPU): launches, "
               "copies, synchronisations", (_po("runtime_api"), _pc("ACL_PROF_ACL_API", _ON_OFF)),
               needs=_ACCELERATOR),
    OptionSpec("sys_hardware_mem_freq", _hz(100), None, "sampling rate of on-chip memory, QoS and LLC bandwidth",
               (_po("sys_hardware_mem_freq"),), needs=_ascend("soc_memory", "the on-chip memory counters")),
    OptionSpec("llc_profiling", one_of("read", "write"), "read", "LLC event to sample: read or write rate",
               (_po("llc_profiling"),), needs=_ascend("llc", "the LLC counters")),
    OptionSpec("sys_io_sampling_freq", _hz(100), None, "sampling rate of NIC and RoCE traffic",
               (_po("sys_io_sampling_freq"),), needs=_ascend("nic", "the NIC and RoCE counters")),
    OptionSpec("sys_interconnection_freq", _hz(50), None, "sampling rate of HCCS, PCIe and inter-chip bandwidth",
               (_po("sys_interconnection_freq"),), needs=_ascend("hccs", "the HCCS and PCIe counters")),
    OptionSpec("dvpp_freq", _hz(100), None, "sampling rate of the DVPP media engine",
               (_po("dvpp_freq"),), needs=_ascend("dvpp", "the DVPP counters")),
    OptionSpec("instr_profiling_freq", int_range(300, 30000, "cycles"), None,
               "AI Core and AI Vector bandwidth and latency sampling period", (_po("instr_profiling_freq"),),
               needs=_AICORE),
    OptionSpec("host_sys", _HOST, (), "CPU and/or memory use of this process", (_po("host_sys"),)),
    OptionSpec("host_sys_usage", _HOST, (), "CPU and/or memory use of the whole host and all its processes",
               (_po("host_sys_usage"),)),
    OptionSpec("host_sys_usage_freq", _hz(50), 50, "sampling rate of host_sys and host_sys_usage",
               (_po("host_sys_usage_freq"),)),
    OptionSpec("profile_memory", _BOOL, False, "tensor allocations and frees", (_ms("profile_memory"),)),
    OptionSpec("timeline_limit", int_range(1, unit="MB"), 500, "size limit of an exported timeline file",
               (_ms("timeline_limit"),)),
    OptionSpec("data_process", _BOOL, True, "time each step waits for its data", (_ms("data_process"),)),
    OptionSpec("parallel_strategy", _BOOL, True, "the parallel layout: ranks and process groups",
               (_ms("parallel_strategy"),), needs=_RANKS),
    OptionSpec("with_stack", _BOOL, False, "Python call stacks of operators", (_pc("TORCH_CALL_STACK", _BOOL),)),
    OptionSpec("steps", step_range("step"), None, 'steps to profile: N, "A-B" or [A, B], counted from 0 '
               "(unset: every step)"),
    OptionSpec("epochs", step_range("epoch"), None, "epochs to profile, instead of steps"),
    OptionSpec("warmup_steps", int_range(0, unit="steps"), 0, "steps profiled and discarded before the range, "
               "so the profiler is warm"),
    OptionSpec("flush_every", int_range(0, unit="steps"), 10, "write a trace window every N profiled steps, so "
               "the profiler's memory stays bounded and the data survives a kill (0: one window, written at the "
               "end of the range and held in memory until then)"),
    OptionSpec("record_shapes", _BOOL, _AT_L1, "input shapes and dtypes of operators"),
    OptionSpec("with_flops", _BOOL, _AT_L1, "FLOPs of the operators torch can count"),
    OptionSpec("device", one_of("auto", "cpu", "cuda", off=("auto", "cpu")), "auto",
               "what to profile: auto (CUDA when present), cpu or cuda", needs=_CUDA),
    OptionSpec("trigger", trigger(), None, 'capture on its own: "slow_step:K" captures capture_steps steps after '
               "a step K times the median of the recent steps (unset: only on request)"),
    OptionSpec("on_demand", _BOOL, _ON_DEMAND, "arm instead of profiling: record each step's time, profile "
               "only the steps `perfsight capture` (or the trigger) asks for"),
    OptionSpec("capture_steps", int_range(1, 10000, "steps"), 3, "steps a capture profiles (a `perfsight "
               "capture` request may ask for another number)"),
    OptionSpec("trigger_warmup", int_range(1, unit="steps"), 20, "first steps the trigger never fires on nor "
               "counts in its median (compilation, allocation)"),
    OptionSpec("trigger_window", int_range(3, 100000, "steps"), 50, "recent steps whose median the trigger "
               "compares each step with"),
    OptionSpec("trigger_cooldown", int_range(0, unit="steps"), 100, "steps after a capture before the trigger "
               "may fire again"),
    OptionSpec("trigger_max", int_range(1, 10000, "captures"), 3, "captures the trigger takes at most in a run"),
)

SPEC_BY_NAME = {spec.name: spec for spec in SPECS}
KEYS = {alias.name: (spec, alias) for spec in SPECS for alias in spec.aliases}
assert len(KEYS) == sum(len(spec.aliases) for spec in SPECS), "a key names two options"


# --- rules between keys ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Given:
    key: str         # as the user wrote it
    raw: object      # as the user gave it
    alias: Alias
    value: object    # canonical


@dataclass(frozen=True)
class Context:
    values: Mapping[str, object]            # canonical name -> resolved value
    given: Mapping[str, list[Given]]       # canonical name -> the keys that gave it

    def switched_on(self, name: str, via: str | None = None) -> bool:
        """Given explicitly (under the key ``via`` if set) and not off."""
        return (self.values[name] not in SPEC_BY_NAME[name].kind.off
                and any(via in (None, entry.key) for entry in self.given.get(name, ())))

    def as_given(self, name: str, sep: str = "=") -> str:
        entries = self.given.get(name)
        if entries:
            return f"{entries[0].key}{sep}{shown(entries[0].raw)}"
        return f"{name}{sep}{shown(self.values[name])} (the default)"


@dataclass(frozen=True)
class Requires:
    """``key``, switched on, requires ``other`` to hold one of ``values``."""

    key: str
    other: str
    values: frozenset
    wanted: str                     # ``values`` in words
    source: str
    via: str | None = None          # only when ``key`` is given under this name
    other_given: bool = False       # only when ``other`` is given too

    def check(self, ctx: Context) -> str | None:
        if (not ctx.switched_on(self.key, self.via) or ctx.values[self.other] in self.values
                or (self.other_given and self.other not in ctx.given)):
            return None
        return f"{ctx.as_given(self.key, ': ')} requires {self.wanted}, but {ctx.as_given(self.other, ' is ')} " \
               f"({self.source})"


@dataclass(frozen=True)
class Excludes:
    """``key``, switched on, cannot be combined with any of ``others`` switched on."""

    key: str
    others: tuple[str, ...]
    source: str

    def check(self, ctx: Context) -> str | None:
        if not ctx.switched_on(self.key):
            return None
        clash = [ctx.as_given(other) for other in self.others if ctx.switched_on(other)]
        if not clash:
            return None
        return f"{ctx.as_given(self.key, ': ')} cannot be combined with {', '.join(clash)} ({self.source})"


_TIMED = frozenset({"l0", "l1"})
_OP_TIME_WANTED = "op_time true (task_time on, l0 or l1)"
_TRAINING_ON = frozenset({"on"})

RULES: tuple[Requires | Excludes, ...] = (
    # seed 002, each of the four: "使用此参数时,op_time 必须设置成true。"
    *(Requires(key, "task_time", _TIMED, _OP_TIME_WANTED, "MS_PROFILER_OPTIONS rule")
      for key in ("profile_memory", "hccl", "aic_metrics", "timeline_limit")),
    # seed 000 (PROFILING_OPTIONS): "当训练profiling mode开启即采集训练Profiling数据时,
    # 配置task_trace为on的同时training_trace也必须配置为on。"
    Requires("task_time", "training_trace", _TRAINING_ON, "training_trace on", "seed 000 rule for training",
             via="task_trace", other_given=True),
    # seed 000, training_trace: "当采集正向和反向算子数据时该参数必须配置为on。"
    *(Requires(key, "training_trace", _TRAINING_ON, "training_trace on",
               "seed 000: forward and backward operator data need the step trace", other_given=True)
      for key in ("fp_point", "bp_point")),
    # seed 000, l1: "采集算子下发耗时、算子执行耗时数据以及算子基本信息数据"; l0 "不采集算子基本信息数据"
    *(Requires(key, "task_time", frozenset({"l1"}), "task_time l1", "operator details are collected only at l1")
      for key in ("record_shapes", "with_flops")),
    # seed 000: "instr_profiling_freq与training_trace、task_trace、hccl、aicpu、fp_point、bp_point、aic_metrics、l2、
    # task_time、runtime_api互斥,无法同时执行。"
    Excludes("instr_profiling_freq", ("training_trace", "task_time", "hccl", "aicpu", "fp_point", "bp_point",
                                      "aic_metrics", "l2", "runtime_api"), "seed 000: mutually exclusive"),
    Excludes("steps", ("epochs",), "profile a step range or an epoch range, not both"),
    Requires("trigger", "on_demand", frozenset({True}), "on_demand true", "a trigger captures from an armed job",
             other_given=True),
    *(Excludes(key, ("steps", "epochs"), "an armed job profiles only the steps it is asked for")
      for key in ("on_demand", "trigger")),
)


