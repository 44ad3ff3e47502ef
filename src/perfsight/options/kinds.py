"""Value kinds: the reusable types an option's value is parsed by (choices, switches, integer ranges,
paths, comma sets, step ranges, the AI Core metrics), each turning a value as given into the canonical one
or raising ``BadValue`` with what is allowed."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass


class BadValue(Exception):
    """A value is not allowed; the text is the message after ``"<key>: "``."""


def shown(value: object) -> str:
    """A value as the user would write it in JSON (repr for what JSON cannot hold)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def bad_value(value: object, why: str, allowed: str) -> BadValue:
    return BadValue(f"{shown(value)} {why}; allowed: {allowed}")


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- kinds: reusable value types ------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A value type: how to check and normalise a value, and what is allowed, in words."""

    name: str                          # for describe(): "on/off", "integer", ...
    allowed: str                       # ends every error message about a value of this kind
    parse: Callable[[object], object]  # returns the canonical value or raises BadValue
    off: frozenset = frozenset()       # canonical values that mean "not switched on"
    fallback: object = None            # if set, an invalid value means this instead of failing


def choice(mapping: Mapping[object, object], allowed: str | None = None, *, off=(), name="choice") -> Kind:
    """One of the keys of ``mapping`` (same type, so True is not 1), parsed to its mapped value."""
    allowed = allowed or "one of " + ", ".join(map(shown, mapping))

    def parse(value):
        for given, meaning in mapping.items():
            if value == given and type(value) is type(given):
                return meaning
        raise bad_value(value, "is not allowed", allowed)

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
        if is_int(value):
            number = value
        elif isinstance(value, str) and (match := digits.fullmatch(value)):
            number = int(match[1])
        else:
            raise bad_value(value, "is not an integer", allowed)
        if number < low or (high is not None and number > high):
            raise bad_value(value, "is out of range", allowed)
        return number

    return Kind("integer", allowed, parse)


def text(allowed: str) -> Kind:
    def parse(value):
        if not isinstance(value, str):
            raise bad_value(value, "is not a string", allowed)
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
            raise bad_value(value, "is not a path", allowed)
        for char in name:
            if char in _FORBIDDEN:
                raise BadValue(f"{shown(name)} contains a forbidden character {char!r} (U+{ord(char):04X});"
                           f" not allowed: {_FORBIDDEN_TEXT}")
        return name

    return Kind("path", allowed, parse)


def comma_set(*choices: str) -> Kind:
    """One or more of ``choices``, as a comma-separated string or a list, or [] for none; parsed to a tuple
    in the order given."""
    allowed = ("one or more of " + ", ".join(map(shown, choices))
               + f', comma-separated (e.g. "{",".join(choices)}") or a list ([] for none)')

    def parse(value):
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise bad_value(value, "is not allowed", allowed)
        picked: list[str] = []
        for item in items:
            item = item.strip() if isinstance(item, str) else item
            if item not in choices:
                raise bad_value(value, f"is not allowed ({shown(item)} is not one of them)", allowed)
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
        elif is_int(value):
            first = last = value
        elif isinstance(value, (list, tuple)) and len(value) == 2 and all(map(is_int, value)):
            first, last = value
        else:
            raise bad_value(value, "is not a range", allowed)
        if not 0 <= first <= last:
            raise bad_value(value, "is not an ascending range of non-negative numbers", allowed)
        return (first, last)

    return Kind(f"{unit} range", allowed, parse)


#: the triggers an armed job captures on by itself (``trigger``), and the range of a slow step's factor
SLOW_STEP = "slow_step"
SLOW_STEP_FACTOR = (1.0, 1000.0)


def trigger() -> Kind:
    """``slow_step:K``: capture when a step takes K (> 1) times the running median of the recent steps; parsed
    to ``("slow_step", K)``."""
    low, high = SLOW_STEP_FACTOR
    allowed = (f'"{SLOW_STEP}:K", K a number above {low:g} and at most {high:g} (e.g. "{SLOW_STEP}:2": a step '
               "twice the median of the recent steps)")
    pattern = re.compile(rf"\s*{SLOW_STEP}\s*:\s*(\d+(?:\.\d*)?|\.\d+)\s*")

    def parse(value):
        if not isinstance(value, str) or not (match := pattern.fullmatch(value)):
            raise bad_value(value, "is not a trigger", allowed)
        factor = float(match[1])
        if not low < factor <= high:
            raise bad_value(value, "is out of range", allowed)
        return (SLOW_STEP, factor)

    return Kind("trigger", allowed, parse)


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
    allowed = ("one of " + ", ".join(map(shown, names)) + f', or "{_CUSTOM}" and at most {_MAX_REGISTERS}'
               ' registers, each in [0x1, 0x6E], hex or decimal (e.g. "Custom:0x49,0x8,0x15")')

    def parse(value):
        if isinstance(value, str) and value.startswith(_CUSTOM):
            return _CUSTOM + ",".join(hex(register) for register in _registers(value[len(_CUSTOM):]))
        if isinstance(value, str) and value in names:
            return value
        raise bad_value(value, "is not allowed", allowed)

    return Kind("metrics", allowed, parse, frozenset({"none"}))


def _registers(listed: str) -> list[int]:
    items = [item.strip() for item in listed.split(",")]
    if len(items) > _MAX_REGISTERS:
        raise BadValue(f"Custom registers: {len(items)} given, at most {_MAX_REGISTERS} allowed")
    registers = []
    for item in items:
        if not _REGISTER.fullmatch(item):
            raise BadValue(f"Custom register {shown(item)} is not a number; {_REGISTERS_ALLOWED}")
        register = int(item, 0) if item[:2].lower() == "0x" else int(item)
        if not _REGISTER_RANGE[0] <= register <= _REGISTER_RANGE[1]:
            raise BadValue(f"Custom register {item} is out of range; {_REGISTERS_ALLOWED}")
        registers.append(register)
    return registers


