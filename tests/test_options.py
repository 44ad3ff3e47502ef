"""The option schema: every rule of seeds 000-002, every alias, the defaults, env parsing, hardware reports."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from perfsight.core.errors import OptionError
from perfsight.options import SPECS, CollectEnvironment, Options, describe, from_env, resolve

CPU = CollectEnvironment(has_cuda=False)


def error_of(raw: dict, **kwargs) -> str:
    with pytest.raises(OptionError) as caught:
        resolve(raw, **kwargs)
    return str(caught.value)


# --- one value at a time: (options, fragments the message must hold: key, value, what is allowed) -------

BAD_VALUES = [
    ({"storage_limit": 100}, ["storage_limit: 100 is out of range",
                              'allowed: an integer in [200, 4294967295] (MB), e.g. 200 or "200MB"']),
    ({"storage_limit": 4294967296}, ["storage_limit: 4294967296 is out of range", "[200, 4294967295]"]),
    ({"storage_limit": "199MB"}, ['storage_limit: "199MB" is out of range', "[200, 4294967295]"]),
    ({"storage_limit": "lots"}, ['storage_limit: "lots" is not an integer', "[200, 4294967295]"]),
    ({"storage_limit": True}, ["storage_limit: true is not an integer", "[200, 4294967295]"]),
    ({"storage_limit": 300.5}, ["storage_limit: 300.5 is not an integer", "[200, 4294967295]"]),
    ({"sys_hardware_mem_freq": 0}, ["sys_hardware_mem_freq: 0 is out of range", "[1, 100] (Hz)"]),
    ({"sys_hardware_mem_freq": 101}, ["sys_hardware_mem_freq: 101 is out of range", "[1, 100] (Hz)"]),
    ({"sys_io_sampling_freq": 101}, ["sys_io_sampling_freq: 101 is out of range", "[1, 100] (Hz)"]),
    ({"sys_interconnection_freq": 51}, ["sys_interconnection_freq: 51 is out of range", "[1, 50] (Hz)"]),
    ({"dvpp_freq": 0}, ["dvpp_freq: 0 is out of range", "[1, 100] (Hz)"]),
    ({"instr_profiling_freq": 299}, ["instr_profiling_freq: 299 is out of range", "[300, 30000] (cycles)"]),
    ({"instr_profiling_freq": 30001}, ["instr_profiling_freq: 30001 is out of range", "[300, 30000] (cycles)"]),
    ({"host_sys_usage_freq": 51}, ["host_sys_usage_freq: 51 is out of range", "[1, 50] (Hz)"]),
    ({"timeline_limit": 0}, ["timeline_limit: 0 is out of range", "an integer >= 1 (MB)"]),
    ({"warmup_steps": -1}, ["warmup_steps: -1 is out of range", "an integer >= 0 (steps)"]),
    ({"flush_every": "often"}, ['flush_every: "often" is not an integer', "an integer >= 0 (steps)"]),
    ({"training_trace": "yes"}, ['training_trace: "yes" is not allowed', 'allowed: "on" or "off"']),
    ({"training_trace": True}, ['training_trace: true is not allowed', 'allowed: "on" or "off"']),
    ({"hccl": "ON"}, ['hccl: "ON" is not allowed', 'allowed: "on" or "off"']),
    ({"l2": 1}, ['l2: 1 is not allowed', 'allowed: "on" or "off"']),
    ({"msproftx": "true"}, ['msproftx: "true" is not allowed', 'allowed: "on" or "off"']),
    ({"runtime_api": "of"}, ['runtime_api: "of" is not allowed', 'allowed: "on" or "off"']),
    ({"task_trace": "l2"}, ['task_trace: "l2" is not allowed', '"l0" (timing only) or "l1"']),
    ({"task_time": True}, ['task_time: true is not allowed', '"on" (same as "l1"), "off", "l0"']),
    ({"op_time": "yes"}, ['op_time: "yes" is not allowed', "allowed: true or false"]),
    ({"op_time": 1}, ["op_time: 1 is not allowed", "allowed: true or false"]),
    ({"profile_memory": "True"}, ['profile_memory: "True" is not allowed', "allowed: true or false"]),
    ({"start": "on"}, ['start: "on" is not allowed', "allowed: true or false"]),
    ({"ACL_PROF_HCCL_TRACE": "on"}, ['ACL_PROF_HCCL_TRACE: "on" is not allowed', "allowed: true or false"]),
    ({"TORCH_CALL_STACK": 0}, ["TORCH_CALL_STACK: 0 is not allowed", "allowed: true or false"]),
    ({"llc_profiling": "both"}, ['llc_profiling: "both" is not allowed', 'allowed: one of "read", "write"']),
    ({"device": "tpu"}, ['device: "tpu" is not allowed', 'allowed: one of "auto", "cpu", "cuda"']),
    ({"aic_metrics": "pipeutilization"}, ['aic_metrics: "pipeutilization" is not allowed',
                                          '"ArithmeticUtilization", "PipeUtilization", "Memory"', '"Custom:"']),
    ({"aicore_metrics": 6}, ["aicore_metrics: 6 is not allowed", "0 (ArithmeticUtilization)",
                             "-1 or 255 = 0xFF (none)"]),
    ({"aiCoreMetricsType": True}, ["aiCoreMetricsType: true is not allowed", "5 (MemoryUB)"]),
    ({"aic_metrics": "Custom:" + ",".join(["0x1"] * 9)}, ["aic_metrics: Custom registers: 9 given, at most 8 allowed"]),
    ({"aic_metrics": "Custom:0x49,0x6F"}, ["aic_metrics: Custom register 0x6F is out of range",
                                           "allowed [0x1, 0x6E], hex (0x..) or decimal"]),
    ({"aic_metrics": "Custom:111"}, ["aic_metrics: Custom register 111 is out of range", "[0x1, 0x6E]"]),
    ({"aic_metrics": "Custom:0"}, ["aic_metrics: Custom register 0 is out of range", "[0x1, 0x6E]"]),
    ({"aic_metrics": "Custom:0x49,zz"}, ['aic_metrics: Custom register "zz" is not a number', "[0x1, 0x6E]"]),
    ({"aic_metrics": "Custom:"}, ['aic_metrics: Custom register "" is not a number', "[0x1, 0x6E]"]),
    ({"host_sys": "cpu,disk"}, ['host_sys: "cpu,disk" is not allowed ("disk" is not one of them)',
                                'one or more of "cpu", "mem", comma-separated (e.g. "cpu,mem") or a list']),
    ({"host_sys_usage": ""}, ['host_sys_usage: "" is not allowed', 'one or more of "cpu", "mem"']),
    ({"host_sys_usage": ["cpu", 1]}, ['host_sys_usage: ["cpu", 1] is not allowed (1 is not one of them)',
                                      '([] for none)']),
    ({"fp_point": 3}, ["fp_point: 3 is not a string", 'an operator name, or "" to find it automatically']),
    ({"output": ""}, ['output: "" is not a path', "a non-empty path"]),
    ({"output_path": 5}, ["output_path: 5 is not a path", "a non-empty path"]),
    ({"steps": "5-2"}, ['steps: "5-2" is not an ascending range',
                        'allowed: step N, a range "A-B" or [A, B] (steps counted from 0, inclusive, A <= B)']),
    ({"steps": [-1, 2]}, ["steps: [-1, 2] is not an ascending range", "steps counted from 0, inclusive"]),
    ({"steps": "first"}, ['steps: "first" is not a range', 'allowed: step N, a range "A-B"']),
    ({"epochs": [1, 2, 3]}, ["epochs: [1, 2, 3] is not a range", 'allowed: epoch N, a range "A-B"']),
]


@pytest.mark.parametrize(("raw", "fragments"), BAD_VALUES, ids=[json.dumps(raw) for raw, _ in BAD_VALUES])
def test_bad_value_names_key_value_and_what_is_allowed(raw, fragments):
    message = error_of(raw)
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize("char", ["\n", "\f", "\r", "\b", "\t", "\v", "\x7f"])
@pytest.mark.parametrize("key", ["output", "output_path", "profiler_result_path"])
def test_output_path_rejects_each_forbidden_character(key, char):
    message = error_of({key: f"/tmp/pro{char}f"})
    assert message.startswith(f"{key}: ")
    assert f"forbidden character {char!r} (U+{ord(char):04X})" in message
    assert r"not allowed: \n \f \r \b \t \v \u007F" in message


def test_output_path_is_validated_not_resolved():
    assert resolve(output="prof/out").output == "prof/out"
    assert resolve(output=Path("/tmp/prof")).output == "/tmp/prof"


# --- good values and aliases --------------------------------------------------------------------------

GOOD_VALUES = [
    ({"storage_limit": 200}, "storage_limit", 200),
    ({"storage_limit": 4294967295}, "storage_limit", 4294967295),
    ({"storage_limit": "200MB"}, "storage_limit", 200),
    ({"storage_limit": "1024 mb"}, "storage_limit", 1024),
    ({"storage_limit": "300"}, "storage_limit", 300),
    ({"sys_hardware_mem_freq": 100}, "sys_hardware_mem_freq", 100),
    ({"sys_interconnection_freq": 50}, "sys_interconnection_freq", 50),
    ({"instr_profiling_freq": 300}, "instr_profiling_freq", 300),
    ({"host_sys_usage_freq": 1}, "host_sys_usage_freq", 1),
    ({"task_trace": "on"}, "task_time", "l1"),
    ({"task_time": "l0"}, "task_time", "l0"),
    ({"task_trace": "off"}, "task_time", "off"),
    ({"op_time": True}, "task_time", "l1"),
    ({"op_time": "false"}, "task_time", "off"),
    ({"ACL_PROF_TASK_TIME": False}, "task_time", "off"),
    ({"output": "/tmp/a"}, "output", "/tmp/a"),
    ({"output_path": "/tmp/b"}, "output", "/tmp/b"),
    ({"profiler_result_path": "./result"}, "output", "./result"),
    ({"start": "false"}, "start", False),
    ({"ACL_PROF_TRAINING_TRACE": True}, "training_trace", "on"),
    ({"profile_communication": True}, "hccl", "on"),
    ({"ACL_PROF_HCCL_TRACE": True}, "hccl", "on"),
    ({"hccl": "on"}, "hccl", "on"),
    ({"ACL_PROF_AICPU": True}, "aicpu", "on"),
    ({"aicpu": "on"}, "aicpu", "on"),
    ({"aic_metrics": "MemoryUB"}, "aic_metrics", "MemoryUB"),
    ({"aic_metrics": "Custom:0x49,0x8,0x15,0x1b,0x64,0x10"}, "aic_metrics", "Custom:0x49,0x8,0x15,0x1b,0x64,0x10"),
    ({"aic_metrics": "Custom:0X1, 110 ,0x6E"}, "aic_metrics", "Custom:0x1,0x6e,0x6e"),
    ({"aic_metrics": "Custom:" + ",".join(["1"] * 8)}, "aic_metrics", "Custom:" + ",".join(["0x1"] * 8)),
    ({"aicore_metrics": 0}, "aic_metrics", "ArithmeticUtilization"),
    ({"aicore_metrics": 1}, "aic_metrics", "PipeUtilization"),
    ({"aicore_metrics": 2}, "aic_metrics", "Memory"),
    ({"aicore_metrics": 3}, "aic_metrics", "MemoryL0"),
    ({"aicore_metrics": 4}, "aic_metrics", "ResourceConflictRatio"),
    ({"aicore_metrics": 5}, "aic_metrics", "MemoryUB"),
    ({"aicore_metrics": -1}, "aic_metrics", "none"),
    ({"aiCoreMetricsType": 0xFF}, "aic_metrics", "none"),
    ({"aiCoreMetricsType": 1}, "aic_metrics", "PipeUtilization"),
    ({"ACL_PROF_AICORE_METRICS": False}, "aic_metrics", "none"),
    ({"ACL_PROF_AICORE_METRICS": True}, "aic_metrics", "PipeUtilization"),
    ({"ACL_PROF_AICORE_METRICS": True, "aiCoreMetricsType": 4}, "aic_metrics", "ResourceConflictRatio"),
    ({"ACL_PROF_AICORE_METRICS": False, "aiCoreMetricsType": 1}, "aic_metrics", "none"),
    ({"l2_cache": True}, "l2", "on"),
    ({"ACL_PROF_L2CACHE": "true"}, "l2", "on"),
    ({"ACL_PROF_ACL_API": True}, "runtime_api", "on"),
    ({"TORCH_CALL_STACK": True}, "with_stack", True),
    ({"with_stack": "true"}, "with_stack", True),
    ({"llc_profiling": "write"}, "llc_profiling", "write"),
    ({"host_sys": "cpu,mem"}, "host_sys", ("cpu", "mem")),
    ({"host_sys": ["mem", "cpu", "mem"]}, "host_sys", ("mem", "cpu")),
    ({"host_sys_usage": " mem "}, "host_sys_usage", ("mem",)),
    ({"host_sys_usage": []}, "host_sys_usage", ()),
    ({"fp_point": "fp32_vars/conv2d/BatchNorm"}, "fp_point", "fp32_vars/conv2d/BatchNorm"),
    ({"steps": 3}, "steps", (3, 3)),
    ({"steps": "10"}, "steps", (10, 10)),
    ({"steps": "10-11"}, "steps", (10, 11)),
    ({"steps": [2, 4]}, "steps", (2, 4)),
    ({"epochs": "1 - 2"}, "epochs", (1, 2)),
    ({"device": "cuda"}, "device", "cuda"),
    ({"timeline_limit": "100"}, "timeline_limit", 100),
    ({"data_process": False}, "data_process", False),
    ({"parallel_strategy": False}, "parallel_strategy", False),
]


@pytest.mark.parametrize(("raw", "name", "expected"), GOOD_VALUES, ids=[json.dumps(raw) for raw, _, _ in GOOD_VALUES])
def test_key_maps_to_canonical_value(raw, name, expected):
    assert getattr(resolve(raw), name) == expected


def test_every_key_of_the_issue_is_accepted():
    keys = {alias["name"] for option in describe() for alias in option["aliases"]}
    profiling_options = ("output storage_limit training_trace task_trace task_time hccl aicpu fp_point bp_point "
                         "aic_metrics l2 msproftx runtime_api sys_hardware_mem_freq llc_profiling sys_io_sampling_freq "
                         "sys_interconnection_freq dvpp_freq instr_profiling_freq host_sys host_sys_usage "
                         "host_sys_usage_freq").split()
    ms_profiler_options = ("start output_path op_time profile_memory profile_communication aicore_metrics l2_cache "
                           "timeline_limit data_process parallel_strategy").split()
    profile_config = ("ACL_PROF_ACL_API ACL_PROF_TASK_TIME ACL_PROF_AICORE_METRICS ACL_PROF_AICPU ACL_PROF_L2CACHE "
                      "ACL_PROF_HCCL_TRACE ACL_PROF_TRAINING_TRACE TORCH_CALL_STACK aiCoreMetricsType").split()
    assert set(profiling_options + ms_profiler_options + profile_config) <= keys


def test_seed_examples_resolve():
    po = resolve({"output": "/tmp/profiling", "training_trace": "on", "task_trace": "on", "fp_point": "",
                  "bp_point": "", "aic_metrics": "PipeUtilization"}, source="PROFILING_OPTIONS")
    assert (po.output, po.training_trace, po.task_time, po.aic_metrics) == ("/tmp/profiling", "on", "l1",
                                                                             "PipeUtilization")
    ms = resolve({"start": True, "output_path": "/XXX", "profile_memory": False, "profile_communication": False,
                  "aicore_metrics": 0, "l2_cache": False}, source="MS_PROFILER_OPTIONS")
    assert (ms.start, ms.output, ms.hccl, ms.aic_metrics, ms.l2) == (True, "/XXX", "off", "ArithmeticUtilization",
                                                                     "off")
    npu = resolve(ACL_PROF_ACL_API=True, ACL_PROF_TASK_TIME=True, ACL_PROF_AICORE_METRICS=True, ACL_PROF_AICPU=True,
                  ACL_PROF_L2CACHE=False, ACL_PROF_HCCL_TRACE=True, ACL_PROF_TRAINING_TRACE=False,
                  TORCH_CALL_STACK=False, aiCoreMetricsType=1, profiler_result_path="./results")
    assert (npu.runtime_api, npu.task_time, npu.aicpu, npu.training_trace, npu.aic_metrics) == (
        "on", "l1", "on", "off", "PipeUtilization")


# --- defaults and fallbacks -------------------------------------------------------------------------

DEFAULTS = {
    "output": None, "storage_limit": None, "start": True, "training_trace": "off", "task_time": "l1",
    "hccl": "off", "aicpu": "off", "fp_point": "", "bp_point": "", "aic_metrics": "PipeUtilization", "l2": "off",
    "msproftx": "off", "runtime_api": "off", "sys_hardware_mem_freq": None, "llc_profiling": "read",
    "sys_io_sampling_freq": None, "sys_interconnection_freq": None, "dvpp_freq": None, "instr_profiling_freq": None,
    "host_sys": [], "host_sys_usage": [], "host_sys_usage_freq": 50, "profile_memory": False, "timeline_limit": 500,
    "data_process": True, "parallel_strategy": True, "with_stack": False, "steps": None, "epochs": None,
    "warmup_steps": 0, "flush_every": 10, "record_shapes": True, "with_flops": True, "device": "auto",
    "trigger": None, "on_demand": False, "capture_steps": 3, "trigger_warmup": 20, "trigger_window": 50,
    "trigger_cooldown": 100, "trigger_max": 3,
}


def test_defaults_as_in_the_seeds():
    assert resolve().resolved() == DEFAULTS


def test_ms_profiler_options_get_mindspore_defaults():
    resolved = resolve({}, source="MS_PROFILER_OPTIONS").resolved()
    assert {key: resolved[key] for key in ("start", "output", "aic_metrics")} == {
        "start": False, "output": "./data", "aic_metrics": "ArithmeticUtilization"}
    assert {k: v for k, v in resolved.items() if k not in ("start", "output", "aic_metrics")} == {
        k: v for k, v in DEFAULTS.items() if k not in ("start", "output", "aic_metrics")}


@pytest.mark.parametrize(("task_time", "expected"), [("l1", True), ("on", True), ("l0", False), ("off", False)])
def test_record_shapes_and_with_flops_follow_task_time(task_time, expected):
    options = resolve(task_time=task_time)
    assert (options.record_shapes, options.with_flops) == (expected, expected)


def test_record_shapes_can_be_switched_off_at_l1():
    assert resolve(record_shapes=False).record_shapes is False


@pytest.mark.parametrize("value", ["yes", "ON", True, 1, "l1"])
def test_aicpu_falls_back_to_off_with_a_warning(value):
    options = resolve(aicpu=value)
    assert options.aicpu == "off"
    assert options.warnings == (f"aicpu: {json.dumps(value)} is not allowed; allowed: \"on\" or \"off\"; "
                                "treated as \"off\" (seed 000 rule)",)


def test_acl_prof_aicpu_does_not_fall_back():
    assert 'ACL_PROF_AICPU: "yes" is not allowed; allowed: true or false' in error_of({"ACL_PROF_AICPU": "yes"})


def test_none_counts_as_not_given_but_is_kept_in_given():
    options = resolve({"output": None, "storage_limit": None})
    assert (options.output, options.storage_limit) == (None, None)
    assert options.given == {"output": None, "storage_limit": None}


# --- conflicting keys, unknown keys, several errors ---------------------------------------------------

@pytest.mark.parametrize(("raw", "fragment"), [
    ({"output": "/a", "output_path": "/b"}, 'output: output="/a" and output_path="/b" conflict'),
    ({"op_time": False, "task_trace": "l1"}, 'task_time: op_time=false and task_trace="l1" conflict '
                                             '(they mean "off" and "l1"); give only one'),
    ({"task_trace": "l0", "task_time": "l1"}, 'task_time: task_trace="l0" and task_time="l1" conflict'),
    ({"hccl": "off", "profile_communication": True}, 'hccl: hccl="off" and profile_communication=true conflict'),
    ({"aic_metrics": "Memory", "aicore_metrics": 1}, 'aic_metrics: aic_metrics="Memory" and aicore_metrics=1'),
    ({"with_stack": True, "TORCH_CALL_STACK": False}, "with_stack: with_stack=true and TORCH_CALL_STACK=false"),
])
def test_conflicting_keys_name_both(raw, fragment):
    assert fragment in error_of(raw)


@pytest.mark.parametrize("raw", [
    {"output": "/a", "output_path": "/a", "profiler_result_path": "/a"},
    {"task_trace": "on", "task_time": "l1", "op_time": True, "ACL_PROF_TASK_TIME": "true"},
    {"l2": "on", "l2_cache": True, "ACL_PROF_L2CACHE": True},
])
def test_agreeing_keys_are_fine(raw):
    resolve(raw)


def test_keyword_and_mapping_disagreeing_is_an_error():
    assert error_of({"output": "/a"}, output="/b") == 'output: given twice, as "/a" and as "/b"'
    assert resolve({"output": "/a"}, output="/a").output == "/a"


@pytest.mark.parametrize(("key", "suggestion"), [
    ("strorage_limit", "storage_limit"), ("aicore_metric", "aicore_metrics"), ("outptu", "output"),
    ("acl_prof_hccl_trace", "ACL_PROF_HCCL_TRACE"), ("profile_mem", "profile_memory"), ("warmup", "warmup_steps"),
])
def test_unknown_key_suggests_the_closest(key, suggestion):
    assert error_of({key: 1}) == f"unknown option {key!r}; did you mean {suggestion!r}?"


def test_unknown_key_without_a_close_name():
    assert error_of({"zzzzzz": 1}) == "unknown option 'zzzzzz'; `perfsight run --help-options` lists every option"


def test_every_problem_is_reported_at_once():
    lines = error_of({"storage_limit": 1, "hccl": "yes", "strorage_limit": 300}).splitlines()
    assert lines[0] == "3 invalid options:"
    assert lines[1].startswith("  storage_limit: 1 is out of range")
    assert lines[2].startswith('  hccl: "yes" is not allowed')
    assert lines[3] == "  unknown option 'strorage_limit'; did you mean 'storage_limit'?"


def test_not_a_mapping():
    assert error_of(["output"]) == "options must be a mapping of option names to values, not list"


def test_unknown_source_is_a_programming_error():
    with pytest.raises(ValueError, match="source must be one of"):
        resolve(source="yaml")


# --- rules between keys ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "value"), [
    ("profile_memory", True), ("profile_communication", True), ("aicore_metrics", 1), ("timeline_limit", 100),
    ("hccl", "on"), ("aic_metrics", "Memory"),
])
def test_op_time_is_required_by(key, value):
    message = error_of({key: value, "op_time": False})
    assert message == (f"{key}: {json.dumps(value)} requires op_time true (task_time on, l0 or l1), "
                       "but op_time is false (MS_PROFILER_OPTIONS rule)")


@pytest.mark.parametrize(("key", "value"), [
    ("profile_memory", False), ("profile_communication", False), ("aicore_metrics", -1), ("hccl", "off"),
])
def test_op_time_false_is_fine_when_the_other_is_off(key, value):
    assert resolve({key: value, "op_time": False}).task_time == "off"


def test_op_time_rule_names_the_key_that_switched_task_time_off():
    assert "but task_trace is \"off\"" in error_of({"profile_memory": True, "task_trace": "off"})


@pytest.mark.parametrize("other", [
    {"training_trace": "on"}, {"task_trace": "on"}, {"task_time": "l0"}, {"hccl": "on"}, {"aicpu": "on"},
    {"fp_point": "conv1"}, {"bp_point": "fc"}, {"aic_metrics": "Memory"}, {"l2": "on"}, {"runtime_api": "on"},
    {"op_time": True}, {"ACL_PROF_L2CACHE": True},
])
def test_instr_profiling_freq_excludes(other):
    (key, value), = other.items()
    message = error_of({"instr_profiling_freq": 1000, **other})
    assert message == (f"instr_profiling_freq: 1000 cannot be combined with {key}={json.dumps(value)} "
                       "(seed 000: mutually exclusive)")


def test_instr_profiling_freq_lists_every_offending_key():
    message = error_of({"instr_profiling_freq": 300, "aic_metrics": "Memory", "task_time": "l1"})
    assert 'cannot be combined with task_time="l1", aic_metrics="Memory"' in message


@pytest.mark.parametrize("other", [{}, {"training_trace": "off"}, {"task_trace": "off"}, {"fp_point": ""},
                                   {"aic_metrics": "none"}, {"host_sys": "cpu"}])
def test_instr_profiling_freq_alone_or_with_switches_off(other):
    assert resolve({"instr_profiling_freq": 1000, **other}).instr_profiling_freq == 1000


@pytest.mark.parametrize("value", ["on", "l0", "l1"])
def test_task_trace_on_needs_training_trace_on_when_both_given(value):
    message = error_of({"task_trace": value, "training_trace": "off"})
    assert message == (f'task_trace: "{value}" requires training_trace on, but training_trace is "off" '
                       "(seed 000 rule for training)")
    assert "requires training_trace on" in error_of({"task_trace": value, "ACL_PROF_TRAINING_TRACE": False})
    resolve({"task_trace": value, "training_trace": "on"})
    resolve({"task_trace": value})  # training_trace not given: a PyTorch run is not known to be training
    resolve({"task_trace": "off", "training_trace": "off"})


@pytest.mark.parametrize("raw", [
    {"ACL_PROF_TASK_TIME": True, "ACL_PROF_TRAINING_TRACE": False},  # seed 001's own example
    {"task_time": "l0", "training_trace": "off"},  # our canonical names, as resolved() writes them
    {"op_time": True, "training_trace": "off"},
])
def test_task_trace_rule_concerns_only_the_task_trace_key(raw):
    assert resolve(raw).training_trace == "off"


@pytest.mark.parametrize("key", ["fp_point", "bp_point"])
def test_fp_bp_point_need_training_trace_on_when_it_is_given(key):
    assert error_of({key: "conv1", "training_trace": "off"}) == (
        f'{key}: "conv1" requires training_trace on, but training_trace is "off" '
        "(seed 000: forward and backward operator data need the step trace)")
    resolve({key: "", "training_trace": "off"})
    resolve({key: "conv1"})


@pytest.mark.parametrize("key", ["record_shapes", "with_flops"])
@pytest.mark.parametrize("task_time", ["l0", "off"])
def test_record_shapes_and_with_flops_true_need_l1(key, task_time):
    assert error_of({key: True, "task_time": task_time}) == (
        f'{key}: true requires task_time l1, but task_time is "{task_time}" '
        "(operator details are collected only at l1)")


def test_steps_and_epochs_exclude_each_other():
    assert error_of({"steps": "1-2", "epochs": 1}) == (
        'steps: "1-2" cannot be combined with epochs=1 (profile a step range or an epoch range, not both)')


# --- resolved, not_collected, describe ----------------------------------------------------------------

def test_resolved_is_json_and_resolves_back_to_the_same_options():
    options = resolve(steps="3-5", host_sys="cpu,mem", aic_metrics="Custom:73,0x8", task_time="l0",
                      storage_limit="500MB", output="/tmp/p")
    resolved = json.loads(json.dumps(options.resolved()))
    again = resolve(resolved)
    assert again.resolved() == resolved
    assert dataclasses.replace(again, given=options.given) == options


def test_options_are_frozen_and_keep_what_was_given():
    options = resolve({"op_time": "true"}, source="cli")
    assert (options.given, options.source) == ({"op_time": "true"}, "cli")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.task_time = "off"


def test_options_fields_follow_the_table():
    names = [f.name for f in dataclasses.fields(Options)]
    assert names == [spec.name for spec in SPECS] + ["given", "source", "warnings"]


NOT_COLLECTED_ON_CPU = [
    ({"aic_metrics": "PipeUtilization"}, "aic_metrics", "Ascend NPU"),
    ({"aicore_metrics": 0}, "aic_metrics", "AI Core registers"),
    ({"ACL_PROF_AICORE_METRICS": True}, "aic_metrics", "AI Core registers"),
    ({"llc_profiling": "read"}, "llc_profiling", "LLC"),
    ({"sys_interconnection_freq": 10}, "sys_interconnection_freq", "HCCS"),
    ({"sys_hardware_mem_freq": 10}, "sys_hardware_mem_freq", "on-chip memory"),
    ({"sys_io_sampling_freq": 10}, "sys_io_sampling_freq", "NIC"),
    ({"dvpp_freq": 10}, "dvpp_freq", "DVPP"),
    ({"instr_profiling_freq": 1000}, "instr_profiling_freq", "AI Core registers"),
    ({"l2": "on"}, "l2", "L2 cache"),
    ({"l2_cache": True}, "l2", "L2 cache"),
    ({"aicpu": "on"}, "aicpu", "AI CPU"),
    ({"hccl": "on"}, "hccl", "single rank"),
    ({"profile_communication": True}, "hccl", "more than one rank"),
    ({"parallel_strategy": True}, "parallel_strategy", "single rank"),
    ({"runtime_api": "on"}, "runtime_api", "CPU only"),
    ({"device": "cuda"}, "device", "CUDA GPU"),
]


@pytest.mark.parametrize(("raw", "name", "reason"), NOT_COLLECTED_ON_CPU,
                         ids=[json.dumps(raw) for raw, _, _ in NOT_COLLECTED_ON_CPU])
def test_switches_without_hardware_are_accepted_and_reported(raw, name, reason):
    [(key, why)] = resolve(raw).not_collected(CPU)
    assert key == name and reason in why and why.startswith("needs ")


@pytest.mark.parametrize("raw", [
    {}, {"aic_metrics": "none"}, {"aicore_metrics": -1}, {"ACL_PROF_AICORE_METRICS": False}, {"l2": "off"},
    {"hccl": "off"}, {"device": "cpu"}, {"device": "auto"}, {"parallel_strategy": False},
    {"host_sys": "cpu,mem", "host_sys_usage": "cpu", "msproftx": "on", "profile_memory": True, "with_stack": True},
], ids=json.dumps)
def test_defaults_and_switches_off_are_never_reported(raw):
    assert resolve(raw).not_collected(CPU) == []


@pytest.mark.parametrize(("raw", "env"), [
    ({"hccl": "on"}, CollectEnvironment(has_cuda=False, world_size=2)),
    ({"runtime_api": "on"}, CollectEnvironment(has_cuda=True)),
    ({"device": "cuda"}, CollectEnvironment(has_cuda=True)),
    ({"aic_metrics": "Memory", "l2": "on", "llc_profiling": "write", "sys_interconnection_freq": 5},
     CollectEnvironment(has_cuda=False, is_ascend=True)),
])
def test_reported_only_when_the_hardware_is_missing(raw, env):
    assert resolve(raw).not_collected(env) == []


def test_describe_lists_every_option_with_its_aliases():
    described = {option["name"]: option for option in describe()}
    assert list(described) == [spec.name for spec in SPECS]
    assert all(option["help"] and option["allowed"] and option["aliases"] for option in described.values())
    assert described["task_time"]["aliases"] == [
        {"name": "task_trace", "vocabulary": "PROFILING_OPTIONS", "allowed": described["task_time"]["allowed"]},
        {"name": "task_time", "vocabulary": "PROFILING_OPTIONS", "allowed": described["task_time"]["allowed"]},
        {"name": "op_time", "vocabulary": "MS_PROFILER_OPTIONS", "allowed": "true or false"},
        {"name": "ACL_PROF_TASK_TIME", "vocabulary": "profileConfig", "allowed": "true or false"},
    ]
    assert described["record_shapes"]["default"] == "true when task_time is l1, else false"
    assert described["start"]["defaults_by_source"] == {"MS_PROFILER_OPTIONS": False}
    assert described["steps"]["aliases"] == [
        {"name": "steps", "vocabulary": "perfsight", "allowed": described["steps"]["allowed"]}]
    assert described["llc_profiling"]["needs"] == "llc"
    json.dumps(describe())


# --- environment variables -------------------------------------------------------------------------------

def test_no_variable_set():
    assert from_env({}) is None
    assert from_env({"PERFSIGHT_OPTIONS": "  "}) is None


def test_perfsight_options_json():
    options = from_env({"PERFSIGHT_OPTIONS": '{"output": "./prof", "task_time": "l0", "steps": "10-11"}'})
    assert (options.output, options.task_time, options.steps, options.source) == ("./prof", "l0", (10, 11),
                                                                                  "PERFSIGHT_OPTIONS")
    assert options.given == {"output": "./prof", "task_time": "l0", "steps": "10-11"}


def test_perfsight_options_wins_over_the_seed_variables():
    environ = {"PROFILING_OPTIONS": '{"task_trace": "off"}', "MS_PROFILER_OPTIONS": '{"start": true}',
               "PERFSIGHT_OPTIONS": '{"task_time": "l0"}'}
    assert from_env(environ).task_time == "l0"
    del environ["PERFSIGHT_OPTIONS"]
    assert (from_env(environ).task_time, from_env(environ).source) == ("off", "PROFILING_OPTIONS")
    del environ["PROFILING_OPTIONS"]
    assert (from_env(environ).start, from_env(environ).source) == (True, "MS_PROFILER_OPTIONS")


def test_ms_profiler_options_without_start_leaves_collection_off():
    options = from_env({"MS_PROFILER_OPTIONS": '{"output_path": "/tmp/ms"}'})
    assert (options.start, options.output) == (False, "/tmp/ms")


def test_invalid_json_names_the_variable_and_the_position():
    with pytest.raises(OptionError) as caught:
        from_env({"PERFSIGHT_OPTIONS": '{"output": "./prof",\n "task_time": l0}'})
    assert str(caught.value).startswith(
        "PERFSIGHT_OPTIONS: invalid JSON at line 2 column 15 (character 35): Expecting value; "
        'expected an object such as {"output": "./prof"')


@pytest.mark.parametrize(("text", "shown"), [('["output"]', '["output"]'), ('"on"', '"on"'), ("3", "3")])
def test_json_that_is_not_an_object(text, shown):
    with pytest.raises(OptionError) as caught:
        from_env({"PROFILING_OPTIONS": text})
    assert str(caught.value) == (f'PROFILING_OPTIONS: expected a JSON object such as {{"output": "./prof", '
                                 f'"task_time": "l1"}}, not {shown}')


def test_repeated_json_key():
    with pytest.raises(OptionError, match="PERFSIGHT_OPTIONS: 'output' given more than once"):
        from_env({"PERFSIGHT_OPTIONS": '{"output": "/a", "output": "/b"}'})


def test_env_errors_name_the_variable():
    with pytest.raises(OptionError) as caught:
        from_env({"PROFILING_OPTIONS": '{"storage_limit": 100}'})
    assert str(caught.value).startswith("PROFILING_OPTIONS: storage_limit: 100 is out of range")
    with pytest.raises(OptionError) as caught:
        from_env({"MS_PROFILER_OPTIONS": '{"profile_memory": "yes", "l2_cache": 1}'})
    assert str(caught.value).splitlines()[0] == "MS_PROFILER_OPTIONS: 2 invalid options:"
