"""TuneSettings.from_env: the seed's variable names and perfsight's, defaults, and errors that name the
variable, the value and what is allowed."""
from pathlib import Path

import pytest

from perfsight.core.errors import OptionError
from perfsight.tune.env import DEFAULT_BANK_PATH, TuneSettings, process_rank


def test_defaults():
    settings = TuneSettings.from_env({})
    assert settings.mode is None
    assert settings.bank_path == DEFAULT_BANK_PATH.expanduser()
    assert settings.repeat_tune is False
    assert (settings.te_parallel_compiler, settings.tuning_parallel_num) == (8, 1)
    assert settings.work_path == Path.cwd()
    assert settings.rank == 0


def test_seed_example(tmp_path):
    """The seed's own example: export AOE_MODE=2 TUNE_BANK_PATH=... TE_PARALLEL_COMPILER=8 REPEAT_TUNE=False."""
    settings = TuneSettings.from_env({"AOE_MODE": "2", "TUNE_BANK_PATH": str(tmp_path / "custom_tune_bank"),
                                      "TE_PARALLEL_COMPILER": "8", "REPEAT_TUNE": "False",
                                      "TUNING_PARALLEL_NUM": "4", "ASCEND_WORK_PATH": str(tmp_path)})
    assert settings.mode == 2
    assert settings.bank_path == tmp_path / "custom_tune_bank"
    assert (settings.repeat_tune, settings.te_parallel_compiler, settings.tuning_parallel_num) == (False, 8, 4)
    assert settings.work_path == tmp_path


def test_perfsight_names_come_first(tmp_path):
    settings = TuneSettings.from_env({"PERFSIGHT_AOE_MODE": "1", "AOE_MODE": "2",
                                      "PERFSIGHT_WORK_PATH": str(tmp_path / "a"), "ASCEND_WORK_PATH": str(tmp_path)})
    assert settings.mode == 1
    assert settings.work_path == tmp_path / "a"


@pytest.mark.parametrize("value, expected",
                         [("True", True), ("true", True), ("1", True), ("FALSE", False), ("0", False)])
def test_repeat_tune_switch(value, expected):
    assert TuneSettings.from_env({"REPEAT_TUNE": value}).repeat_tune is expected


@pytest.mark.parametrize("variable, value, allowed", [
    ("AOE_MODE", "3", "1 (subgraph tuning, SGAT) or 2 (operator tuning, OPAT)"),
    ("PERFSIGHT_AOE_MODE", "opat", "1 (subgraph tuning, SGAT) or 2"),
    ("REPEAT_TUNE", "yes", "True or False"),
    ("TE_PARALLEL_COMPILER", "0", "an integer from 1 to 32"),
    ("TUNING_PARALLEL_NUM", "64", "an integer from 1 to 32"),
    ("TUNING_PARALLEL_NUM", "two", "an integer from 1 to 32"),
    ("RANK", "-1", "an integer >= 0"),
])
def test_errors_name_variable_value_and_allowed(variable, value, allowed):
    with pytest.raises(OptionError) as raised:
        TuneSettings.from_env({variable: value})
    assert f"{variable}={value!r}" in str(raised.value)
    assert allowed in str(raised.value)


def test_bank_path_that_is_a_file(tmp_path):
    (tmp_path / "bank").write_text("")
    with pytest.raises(OptionError, match=r"TUNE_BANK_PATH='.*bank' is a file: expected a directory"):
        TuneSettings.from_env({"TUNE_BANK_PATH": str(tmp_path / "bank")})


def test_rank_from_rank_then_local_rank():
    assert process_rank({"LOCAL_RANK": "3"}) == 3
    assert process_rank({"RANK": "5", "LOCAL_RANK": "1"}) == 5
    assert TuneSettings.from_env({"RANK": "2"}).rank == 2
