"""Resolving options as given (Python API, CLI, environment) into frozen ``Options``: every key checked
against the table and the rules up front, one ``OptionError`` listing every problem."""
from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from perfsight.core.errors import OptionError
from perfsight.options.kinds import BadValue, shown
from perfsight.options.specs import (
    ENV_VARIABLES,
    KEYS,
    RULES,
    SOURCES,
    SPECS,
    Alias,
    CollectEnvironment,
    Context,
    Derived,
    Given,
    OptionSpec,
)

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
    trigger: tuple[str, float] | None
    on_demand: bool
    capture_steps: int
    trigger_warmup: int
    trigger_window: int
    trigger_cooldown: int
    trigger_max: int
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
        given = {KEYS[key][0].name for key, value in self.given.items() if value is not None}
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
    entries: dict[str, list[Given]] = {}
    for key, raw_value in given.items():
        if raw_value is None:
            continue
        if key not in KEYS:
            errors.append(_unknown(key))
            continue
        spec, alias = KEYS[key]
        try:
            value = _parse(spec, alias, raw_value, warnings)
        except BadValue as bad:
            errors.append(f"{key}: {bad}")
            continue
        if value is not None:  # None: an alias with no opinion (ACL_PROF_AICORE_METRICS=True)
            entries.setdefault(spec.name, []).append(Given(key, raw_value, alias, value))
    explicit = {}
    for name, group in entries.items():
        try:
            explicit[name] = _merge(group)
        except BadValue as bad:
            errors.append(f"{name}: {bad}")
    _raise_if(errors, source)

    values: dict[str, object] = {}
    for spec in SPECS:
        default = spec.by_source.get(source, spec.default)
        if isinstance(default, Derived):
            default = default.compute(values)
        values[spec.name] = explicit.get(spec.name, default)
    context = Context(values, entries)
    _raise_if([message for rule in RULES if (message := rule.check(context))], source)
    return Options(**values, given=given, source=source, warnings=tuple(warnings))


def _combine(raw: Mapping[str, object] | None, kwargs: Mapping[str, object]) -> dict[str, object]:
    if raw is not None and not isinstance(raw, Mapping):
        raise OptionError(f"options must be a mapping of option names to values, not {type(raw).__name__}")
    given = dict(raw or {})
    for key, value in kwargs.items():
        if key in given and given[key] != value:
            raise OptionError(f"{key}: given twice, as {shown(given[key])} and as {shown(value)}")
        given[key] = value
    return given


def _parse(spec: OptionSpec, alias: Alias, value: object, warnings: list[str]) -> object:
    kind = alias.kind or spec.kind
    try:
        return kind.parse(value)
    except BadValue as bad:
        if kind.fallback is None:
            raise
        # seed 000, aicpu: "如果将该参数配置为“on”和“off”之外的任意值,则按配置为“off”处理。"
        warnings.append(f"{alias.name}: {bad}; treated as {shown(kind.fallback)} (seed 000 rule)")
        return kind.fallback


def _merge(group: list[Given]) -> object:
    """The one value several keys of an option give; keys that disagree are an error."""
    for entry in group:
        if entry.alias.overrides:
            return entry.value
    first = group[0]
    for other in group[1:]:
        if other.value != first.value:
            raise BadValue(f"{first.key}={shown(first.raw)} and {other.key}={shown(other.raw)} conflict (they mean "
                       f"{shown(first.value)} and {shown(other.value)}); give only one")
    return first.value


def _unknown(key: object) -> str:
    if not isinstance(key, str):
        return f"option names are strings, not {key!r}"
    by_lower = {name.lower(): name for name in KEYS}
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
        raise OptionError(f"{variable}: expected a JSON object such as {_EXAMPLE}, not {shown(loaded)}")
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
