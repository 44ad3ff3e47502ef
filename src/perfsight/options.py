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
and what is allowed. ``perfsight export``'s own option values (``STEP_MODEL_ID``, ``EXPORT_FORMATS``) are
defined and checked here too.

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
"""
from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from perfsight.core.errors import OptionError

#: where options can come from; the environment variables are read by :func:`from_env` in this order
ENV_VARIABLES = ("PERFSIGHT_OPTIONS", "PROFILING_OPTIONS", "MS_PROFILER_OPTIONS")
SOURCES = ("api", "cli", *ENV_VARIABLES)

_PO, _MS, _PC, _PS = "PROFILING_OPTIONS", "MS_PROFILER_OPTIONS", "profileConfig", "perfsight"


class _Bad(Exception):
    """A value is not allowed; the text is the message after ``"<key>: "``."""


def _show(value: object) -> str:
    """A value as the user would write it in JSON (repr for what JSON cannot hold)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _bad(value: object, why: str, allowed: str) -> _Bad:
    return _Bad(f"{_show(value)} {why}; allowed: {allowed}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- kinds: reusable value types ------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A value type: how to check and normalise a value, and what is allowed, in words."""

    name: str                          # for describe(): "on/off", "integer", ...
    allowed: str                       # ends every error message about a value of this kind
    parse: Callable[[object], object]  # returns the canonical value or raises _Bad
    off: frozenset = frozenset()       # canonical values that mean "not switched on"
    fallback: object = None            # if set, an invalid value means this instead of failing


def choice(mapping: Mapping[object, object], allowed: str | None = None, *, off=(), name="choice") -> Kind:
    """One of the keys of ``mapping`` (same type, so True is not 1), parsed to its mapped value."""
    allowed = allowed or "one of " + ", ".join(map(_show, mapping))

    def parse(value):
        for given, meaning in mapping.items():
            if value == given and type(value) is type(given):
                return meaning
        raise _bad(value, "is not allowed", allowed)

    return Kind(name, allowed, parse, frozenset(off))


def one_of(*values: object, off=()) -> Kind:
    return choice({value: value for value in values}, off=off)


def boolean(true: object = True, false: object = False) -> Kind:
    """JSON true/false or the strings "true"/"false", parsed to ``true``/``false``."""
    return choice({True: true, "true": true, False: false, "false": false}, "true or false",
                  off=(false,), name="boolean")


def switch() -> Kind:
    return choice({"on": "on", "off": "off"}, '"on" or "off"', off=("off",), name="on/off")


def level() -> Kind:
    return choice({"off": "off", "l0": "l0", "l1": "l1", "on": "l1"},
                  '"on" (same as "l1"), "off", "l0" (timing only) or "l1" (timing and operator details)',
                  off=("off",), name="level")


def int_range(low: int, high: int | None = None, unit: str = "", *, suffix: bool = False) -> Kind:
    """An integer in [low, high] (no upper bound when ``high`` is None); a string of digits is accepted,
    followed by ``unit`` when ``suffix`` (``"200MB"``)."""
    allowed = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}"
    allowed += f" ({unit})" if unit else ""
    allowed += f', e.g. {low} or "{low}{unit}"' if suffix else ""
    digits = re.compile(r"\s*([+-]?\d+)\s*" + (f"(?:{re.escape(unit)})?\\s*" if suffix else ""), re.IGNORECASE)

    def parse(value):
        if _is_int(value):
            number = value
        elif isinstance(value, str) and (match := digits.fullmatch(value)):
            number = int(match[1])
        else:
            raise _bad(value, "is not an integer", allowed)
        if number < low or (high is not None and number > high):
            raise _bad(value, "is out of range", allowed)
        return number

    return Kind("integer", allowed, parse)


def text(allowed: str) -> Kind:
    def parse(value):
        if not isinstance(value, str):
            raise _bad(value, "is not a string", allowed)
        return value

    return Kind("string", allowed, parse, frozenset({""}))


_FORBIDDEN = "\n\f\r\b\t\v\x7f"
_FORBIDDEN_TEXT = r"\n \f \r \b \t \v \u007F"


def path() -> Kind:
    """A directory path (not resolved here), without seed 000's forbidden characters."""
    allowed = f"a non-empty path without the characters {_FORBIDDEN_TEXT}"

    def parse(value):
        name = os.fspath(value) if isinstance(value, os.PathLike) else value
        if not isinstance(name, str) or not name:
            raise _bad(value, "is not a path", allowed)
        for char in name:
            if char in _FORBIDDEN:
                raise _Bad(f"{_show(name)} contains a forbidden character {char!r} (U+{ord(char):04X});"
                           f" not allowed: {_FORBIDDEN_TEXT}")
        return name

    return Kind("path", allowed, parse)


def comma_set(*choices: str) -> Kind:
    """One or more of ``choices``, as a comma-separated string or a list, or [] for none; parsed to a tuple
    in the order given."""
    allowed = ("one or more of " + ", ".join(map(_show, choices))
               + f', comma-separated (e.g. "{",".join(choices)}") or a list ([] for none)')

    def parse(value):
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise _bad(value, "is not allowed", allowed)
        picked: list[str] = []
        for item in items:
            item = item.strip() if isinstance(item, str) else item
            if item not in choices:
                raise _bad(value, f"is not allowed ({_show(item)} is not one of them)", allowed)
            if item not in picked:
                picked.append(item)
        return tuple(picked)

    return Kind("list", allowed, parse, frozenset({()}))


def step_range(unit: str) -> Kind:
    """A 0-based inclusive range of steps or epochs: N, "A-B" or [A, B]; parsed to (A, B)."""
    allowed = f'{unit} N, a range "A-B" or [A, B] ({unit}s counted from 0, inclusive, A <= B)'
    pattern = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")

    def parse(value):
        if isinstance(value, str) and (match := pattern.fullmatch(value)):
            first, last = int(match[1]), int(match[2] or match[1])
        elif _is_int(value):
            first = last = value
        elif isinstance(value, (list, tuple)) and len(value) == 2 and all(map(_is_int, value)):
            first, last = value
        else:
            raise _bad(value, "is not a range", allowed)
        if not 0 <= first <= last:
            raise _bad(value, "is not an ascending range of non-negative numbers", allowed)
        return (first, last)

    return Kind(f"{unit} range", allowed, parse)


AIC_METRICS = ("ArithmeticUtilization", "PipeUtilization", "Memory", "MemoryL0", "MemoryUB",
               "ResourceConflictRatio", "L2Cache")
_CUSTOM = "Custom:"
_MAX_REGISTERS = 8
_REGISTER_RANGE = (0x1, 0x6E)
_REGISTER = re.compile(r"0[xX][0-9a-fA-F]+|\d+")
_REGISTERS_ALLOWED = "allowed [0x1, 0x6E], hex (0x..) or decimal"


def aic_metrics() -> Kind:
    """A metric group of seed 000 (or "none"), or ``Custom:`` registers, normalised to lower-case hex."""
    names = (*AIC_METRICS, "none")
    allowed = ("one of " + ", ".join(map(_show, names)) + f', or "{_CUSTOM}" and at most {_MAX_REGISTERS}'
               ' registers, each in [0x1, 0x6E], hex or decimal (e.g. "Custom:0x49,0x8,0x15")')

    def parse(value):
        if isinstance(value, str) and value.startswith(_CUSTOM):
            return _CUSTOM + ",".join(hex(register) for register in _registers(value[len(_CUSTOM):]))
        if isinstance(value, str) and value in names:
            return value
        raise _bad(value, "is not allowed", allowed)

    return Kind("metrics", allowed, parse, frozenset({"none"}))


def _registers(listed: str) -> list[int]:
    items = [item.strip() for item in listed.split(",")]
    if len(items) > _MAX_REGISTERS:
        raise _Bad(f"Custom registers: {len(items)} given, at most {_MAX_REGISTERS} allowed")
    registers = []
    for item in items:
        if not _REGISTER.fullmatch(item):
            raise _Bad(f"Custom register {_show(item)} is not a number; {_REGISTERS_ALLOWED}")
        register = int(item, 0) if item[:2].lower() == "0x" else int(item)
        if not _REGISTER_RANGE[0] <= register <= _REGISTER_RANGE[1]:
            raise _Bad(f"Custom register {item} is out of range; {_REGISTERS_ALLOWED}")
        registers.append(register)
    return registers


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
            object.__setattr__(self, "aliases", (Alias(self.name, _PS), *self.aliases))


def _po(name: str) -> Alias:
    return Alias(name, _PO)


def _ms(name: str, kind: Kind | None = None) -> Alias:
    return Alias(name, _MS, kind)


def _pc(name: str, kind: Kind, overrides: bool = False) -> Alias:
    return Alias(name, _PC, kind, overrides)


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

SPECS: tuple[OptionSpec, ...] = (
    OptionSpec("output", path(), None, "directory for the run directories; a relative path resolves against "
               "the working directory (unset: PERFSIGHT_WORK_PATH, else ./perfsight_data)",
               (_po("output"), _ms("output_path"), Alias("profiler_result_path", _PC)), by_source={_MS: "./data"}),
    OptionSpec("storage_limit", int_range(200, 4294967295, "MB", suffix=True), None,
               "most MB of perfsight runs the output directory may hold; their oldest trace windows age out "
               "first, never a file perfsight did not write (unset: 90% of free disk)",
               (_po("storage_limit"),)),
    OptionSpec("start", _BOOL, True, "collect from the start; false waits for Profiler.start()",
               (_ms("start"),), by_source={_MS: False}),
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
               needs=_AICORE, by_source={_MS: "ArithmeticUtilization"}),
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
    OptionSpec("flush_every", int_range(0, unit="steps"), 0, "write a trace window every N steps, so data "
               "survives a kill (0: once, at the end of the range)"),
    OptionSpec("record_shapes", _BOOL, _AT_L1, "input shapes and dtypes of operators"),
    OptionSpec("with_flops", _BOOL, _AT_L1, "FLOPs of the operators torch can count"),
    OptionSpec("device", one_of("auto", "cpu", "cuda", off=("auto", "cpu")), "auto",
               "what to profile: auto (CUDA when present), cpu or cuda", needs=_CUDA),
)

_SPEC = {spec.name: spec for spec in SPECS}
_KEYS = {alias.name: (spec, alias) for spec in SPECS for alias in spec.aliases}
assert len(_KEYS) == sum(len(spec.aliases) for spec in SPECS), "a key names two options"


# --- rules between keys ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Given:
    key: str         # as the user wrote it
    raw: object      # as the user gave it
    alias: Alias
    value: object    # canonical


@dataclass(frozen=True)
class _Context:
    values: Mapping[str, object]            # canonical name -> resolved value
    given: Mapping[str, list[_Given]]       # canonical name -> the keys that gave it

    def switched_on(self, name: str, via: str | None = None) -> bool:
        """Given explicitly (under the key ``via`` if set) and not off."""
        return (self.values[name] not in _SPEC[name].kind.off
                and any(via in (None, entry.key) for entry in self.given.get(name, ())))

    def as_given(self, name: str, sep: str = "=") -> str:
        entries = self.given.get(name)
        if entries:
            return f"{entries[0].key}{sep}{_show(entries[0].raw)}"
        return f"{name}{sep}{_show(self.values[name])} (the default)"


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

    def check(self, ctx: _Context) -> str | None:
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

    def check(self, ctx: _Context) -> str | None:
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
    # seed 000: "当训练profiling mode开启即采集训练Profiling数据时,配置task_trace为on的同时training_trace也必须配置为on。"
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
)


# --- perfsight export's options (msprof export's) ---------------------------------------------------

#: ``--model-id`` of msprof's step mode ("--model-id=4294967295,为Step模式"): iterations are training steps
STEP_MODEL_ID = 4294967295
#: ``--format``: the formats of the summary files
EXPORT_FORMATS = ("csv", "json")


def check_export_format(fmt: object) -> str:
    """``fmt`` when it is one of ``EXPORT_FORMATS``; else an OptionError naming ``--format``, the value and what
    is allowed (the one check of the format: the CLI, ``perfsight.export`` and ``export_summary``)."""
    if fmt not in EXPORT_FORMATS:
        raise OptionError(f"--format: {fmt!r} is not allowed; allowed: {', '.join(EXPORT_FORMATS)}")
    return fmt


# --- the resolved options -------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """Every option, resolved (defaults applied), one attribute per :data:`SPECS` entry, in its order."""

    output: str | None
    storage_limit: int | None
    start: bool
    training_trace: str
    task_time: str
    hccl: str
    aicpu: str
    fp_point: str
    bp_point: str
    aic_metrics: str
    l2: str
    msproftx: str
    runtime_api: str
    sys_hardware_mem_freq: int | None
    llc_profiling: str
    sys_io_sampling_freq: int | None
    sys_interconnection_freq: int | None
    dvpp_freq: int | None
    instr_profiling_freq: int | None
    host_sys: tuple[str, ...]
    host_sys_usage: tuple[str, ...]
    host_sys_usage_freq: int
    profile_memory: bool
    timeline_limit: int
    data_process: bool
    parallel_strategy: bool
    with_stack: bool
    steps: tuple[int, int] | None
    epochs: tuple[int, int] | None
    warmup_steps: int
    flush_every: int
    record_shapes: bool
    with_flops: bool
    device: str
    given: Mapping[str, object] = field(default_factory=dict)  # exactly what the user gave, keys as given
    source: str = "api"
    warnings: tuple[str, ...] = ()  # invalid values a seed says to read as something else (aicpu)

    def resolved(self) -> dict[str, object]:
        """Canonical name -> value, JSON-serialisable (for the manifest)."""
        return {spec.name: _jsonable(getattr(self, spec.name)) for spec in SPECS}

    def not_collected(self, env: CollectEnvironment) -> list[tuple[str, str]]:
        """(canonical name, reason) of each option the user switched on whose hardware this run lacks."""
        # every key given counts, even one with no opinion of its own (ACL_PROF_AICORE_METRICS=True asks for
        # AI Core metrics as surely as aic_metrics does)
        given = {_KEYS[key][0].name for key, value in self.given.items() if value is not None}
        return [(spec.name, f"needs {spec.needs.what}; {spec.needs.missing}") for spec in SPECS
                if spec.needs and spec.name in given and getattr(self, spec.name) not in spec.kind.off
                and not spec.needs.present(env)]


def _jsonable(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def resolve(raw: Mapping[str, object] | None = None, *, source: str = "api", **kwargs: object) -> Options:
    """Check ``raw`` and ``kwargs`` (keys from any vocabulary) and resolve every option.

    Raises OptionError listing every problem, each naming the key as given, the value and what is allowed.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
    given = _combine(raw, kwargs)
    errors: list[str] = []
    warnings: list[str] = []
    entries: dict[str, list[_Given]] = {}
    for key, raw_value in given.items():
        if raw_value is None:
            continue
        if key not in _KEYS:
            errors.append(_unknown(key))
            continue
        spec, alias = _KEYS[key]
        try:
            value = _parse(spec, alias, raw_value, warnings)
        except _Bad as bad:
            errors.append(f"{key}: {bad}")
            continue
        if value is not None:  # None: an alias with no opinion (ACL_PROF_AICORE_METRICS=True)
            entries.setdefault(spec.name, []).append(_Given(key, raw_value, alias, value))
    explicit = {}
    for name, group in entries.items():
        try:
            explicit[name] = _merge(group)
        except _Bad as bad:
            errors.append(f"{name}: {bad}")
    _raise_if(errors, source)

    values: dict[str, object] = {}
    for spec in SPECS:
        default = spec.by_source.get(source, spec.default)
        if isinstance(default, Derived):
            default = default.compute(values)
        values[spec.name] = explicit.get(spec.name, default)
    context = _Context(values, entries)
    _raise_if([message for rule in RULES if (message := rule.check(context))], source)
    return Options(**values, given=given, source=source, warnings=tuple(warnings))


def _combine(raw: Mapping[str, object] | None, kwargs: Mapping[str, object]) -> dict[str, object]:
    if raw is not None and not isinstance(raw, Mapping):
        raise OptionError(f"options must be a mapping of option names to values, not {type(raw).__name__}")
    given = dict(raw or {})
    for key, value in kwargs.items():
        if key in given and given[key] != value:
            raise OptionError(f"{key}: given twice, as {_show(given[key])} and as {_show(value)}")
        given[key] = value
    return given


def _parse(spec: OptionSpec, alias: Alias, value: object, warnings: list[str]) -> object:
    kind = alias.kind or spec.kind
    try:
        return kind.parse(value)
    except _Bad as bad:
        if kind.fallback is None:
            raise
        # seed 000, aicpu: "如果将该参数配置为“on”和“off”之外的任意值,则按配置为“off”处理。"
        warnings.append(f"{alias.name}: {bad}; treated as {_show(kind.fallback)} (seed 000 rule)")
        return kind.fallback


def _merge(group: list[_Given]) -> object:
    """The one value several keys of an option give; keys that disagree are an error."""
    for entry in group:
        if entry.alias.overrides:
            return entry.value
    first = group[0]
    for other in group[1:]:
        if other.value != first.value:
            raise _Bad(f"{first.key}={_show(first.raw)} and {other.key}={_show(other.raw)} conflict (they mean "
                       f"{_show(first.value)} and {_show(other.value)}); give only one")
    return first.value


def _unknown(key: object) -> str:
    if not isinstance(key, str):
        return f"option names are strings, not {key!r}"
    by_lower = {name.lower(): name for name in _KEYS}
    close = difflib.get_close_matches(key.lower(), by_lower, n=1)
    hint = f"did you mean {by_lower[close[0]]!r}?" if close else "`perfsight run --help-options` lists every option"
    return f"unknown option {key!r}; {hint}"


def _raise_if(errors: list[str], source: str) -> None:
    if not errors:
        return
    where = f"{source}: " if source in ENV_VARIABLES else ""
    if len(errors) == 1:
        raise OptionError(where + errors[0])
    raise OptionError(f"{where}{len(errors)} invalid options:\n" + "\n".join(f"  {error}" for error in errors))


_EXAMPLE = '{"output": "./prof", "task_time": "l1"}'


def from_env(environ: Mapping[str, str] = os.environ) -> Options | None:
    """Options from PERFSIGHT_OPTIONS, else PROFILING_OPTIONS, else MS_PROFILER_OPTIONS (each a JSON object);
    None when none is set (an empty value counts as unset)."""
    for variable in ENV_VARIABLES:
        value = environ.get(variable, "").strip()
        if value:
            return resolve(load_json_object(variable, value), source=variable)
    return None


def load_json_object(variable: str, value: str) -> dict[str, object]:
    """The JSON object ``value`` (options as given); errors name ``variable`` and where the JSON breaks."""
    def no_repeats(pairs):
        keys = [key for key, _ in pairs]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise OptionError(f"{variable}: {', '.join(map(repr, repeated))} given more than once")
        return dict(pairs)

    try:
        loaded = json.loads(value, object_pairs_hook=no_repeats)
    except json.JSONDecodeError as error:
        raise OptionError(f"{variable}: invalid JSON at line {error.lineno} column {error.colno} (character "
                          f"{error.pos}): {error.msg}; expected an object such as {_EXAMPLE}") from None
    if not isinstance(loaded, dict):
        raise OptionError(f"{variable}: expected a JSON object such as {_EXAMPLE}, not {_show(loaded)}")
    return loaded


def describe() -> list[dict[str, object]]:
    """Every option: name, type, allowed values, default, help, aliases and needed hardware (for
    ``perfsight run --help-options`` and the docs)."""
    return [{
        "name": spec.name,
        "type": spec.kind.name,
        "allowed": spec.kind.allowed,
        "default": spec.default.text if isinstance(spec.default, Derived) else _jsonable(spec.default),
        "defaults_by_source": {source: _jsonable(value) for source, value in spec.by_source.items()},
        "help": spec.help,
        "aliases": [{"name": alias.name, "vocabulary": alias.vocabulary,
                     "allowed": (alias.kind or spec.kind).allowed} for alias in spec.aliases],
        "needs": spec.needs.name if spec.needs else None,
    } for spec in SPECS]
