"""Tuning settings read from the environment, under the AOE seed's names and perfsight's own.

=======================  ==========================================  =========================================
setting                  variables (first set wins)                  allowed / default
=======================  ==========================================  =========================================
mode                     PERFSIGHT_AOE_MODE, AOE_MODE                1 = subgraph (SGAT), 2 = operator (OPAT);
                                                                     unset = no tuning
bank_path                TUNE_BANK_PATH                              a directory; default ~/.perfsight/tune_bank
repeat_tune              REPEAT_TUNE                                 True/False (1/0); default False
te_parallel_compiler     TE_PARALLEL_COMPILER                        1..32; default 8 (the seed's example);
                                                                     torch.compile's compile workers while
                                                                     tuning, at most one per CPU
tuning_parallel_num      TUNING_PARALLEL_NUM                         1..32; default 1 (timings stay clean)
work_path                PERFSIGHT_WORK_PATH, ASCEND_WORK_PATH       result directory; default the current one
rank                     RANK, LOCAL_RANK                            an integer >= 0; default 0
=======================  ==========================================  =========================================

The seed gives the result directory's precedence (ASCEND_WORK_PATH, else the working directory) but no
default for TUNE_BANK_PATH, TE_PARALLEL_COMPILER or TUNING_PARALLEL_NUM; those defaults are perfsight's.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from perfsight.core.errors import OptionError

SUBGRAPH = 1
OPERATOR = 2
MODE_VARIABLES = ("PERFSIGHT_AOE_MODE", "AOE_MODE")
WORK_PATH_VARIABLES = ("PERFSIGHT_WORK_PATH", "ASCEND_WORK_PATH")
RANK_VARIABLES = ("RANK", "LOCAL_RANK")
DEFAULT_BANK_PATH = Path("~/.perfsight/tune_bank")
PARALLEL_RANGE = (1, 32)
_TRUE = ("true", "1")
_FALSE = ("false", "0")


@dataclass(frozen=True)
class TuneSettings:
    mode: int | None
    bank_path: Path
    repeat_tune: bool
    te_parallel_compiler: int
    tuning_parallel_num: int
    work_path: Path
    rank: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> TuneSettings:
        mode = _first(environ, MODE_VARIABLES)
        bank = environ.get("TUNE_BANK_PATH", "").strip()
        work = _first(environ, WORK_PATH_VARIABLES)
        return cls(
            mode=None if mode is None else _mode(*mode),
            bank_path=_directory("TUNE_BANK_PATH", bank) if bank else DEFAULT_BANK_PATH.expanduser(),
            repeat_tune=_flag(environ, "REPEAT_TUNE", default=False),
            te_parallel_compiler=_integer(environ, "TE_PARALLEL_COMPILER", 8, *PARALLEL_RANGE),
            tuning_parallel_num=_integer(environ, "TUNING_PARALLEL_NUM", 1, *PARALLEL_RANGE),
            work_path=_directory(*work) if work else Path.cwd(),
            rank=process_rank(environ),
        )


def process_rank(environ: Mapping[str, str] = os.environ) -> int:
    """This process's rank in a distributed run (RANK, else LOCAL_RANK); 0 when neither is set."""
    found = _first(environ, RANK_VARIABLES)
    if found is None:
        return 0
    name, text = found
    if not text.isdigit():
        raise OptionError(f"{name}={text!r} is not a rank: expected an integer >= 0")
    return int(text)


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        text = environ.get(name, "").strip()
        if text:
            return name, text
    return None


def _mode(name: str, text: str) -> int:
    if text not in (str(SUBGRAPH), str(OPERATOR)):
        raise OptionError(f"{name}={text!r} is not a tuning mode: expected 1 (subgraph tuning, SGAT) "
                          "or 2 (operator tuning, OPAT)")
    return int(text)


def _directory(name: str, text: str) -> Path:
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise OptionError(f"{name}={text!r} is a file: expected a directory (created if missing)")
    return path.absolute()


def _flag(environ: Mapping[str, str], name: str, *, default: bool) -> bool:
    text = environ.get(name, "").strip()
    if not text:
        return default
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise OptionError(f"{name}={text!r} is not a switch: expected True or False (or 1 or 0)")


def _integer(environ: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise OptionError(f"{name}={text!r} is out of range: expected an integer from {low} to {high}")
    return int(text)
