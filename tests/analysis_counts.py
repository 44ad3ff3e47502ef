"""How often each analysis is computed, for the tests proving that every surface gets its analyses from the
run's memo: ``count_analyses(monkeypatch)`` wraps every analysis (a public function of a
``perfsight.analysis`` module whose first parameter is ``tables``) in every loaded perfsight module that
refers to it. The wrapper keeps the function's name (``functools.wraps``), so the memo keys it as the function
itself and it records computations, not look-ups."""
from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import sys

import perfsight.analysis

#: the modules whose references are wrapped, imported first so none binds a wrapper after the test
CONSUMERS = ("perfsight.run", "perfsight.cli", "perfsight.views.terminal",
             "perfsight.views.export", "perfsight.views.export.summary", "perfsight.views.export.timeline",
             "perfsight.views.insight.server")


def count_analyses(monkeypatch) -> dict[str, list[tuple]]:
    """Wrap every analysis; returns ``{"module.function": [arguments of each computation]}``, where the
    arguments are (name, value) pairs after the tables, defaults applied."""
    for name in CONSUMERS:
        importlib.import_module(name)
    calls: dict[str, list[tuple]] = {}
    wrapped = {}
    for info in pkgutil.iter_modules(perfsight.analysis.__path__):
        module = importlib.import_module(f"perfsight.analysis.{info.name}")
        for name, fn in vars(module).items():
            if (inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith("_")
                    and list(inspect.signature(fn).parameters)[:1] == ["tables"]):
                wrapped[fn] = _counting(fn, calls.setdefault(f"{info.name}.{name}", []))
    for module in [m for n, m in list(sys.modules.items()) if n.startswith("perfsight") and m is not None]:
        for name, value in list(vars(module).items()):
            if inspect.isfunction(value) and value in wrapped:
                monkeypatch.setattr(module, name, wrapped[value])
    return calls


def _counting(fn, calls: list):
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def counted(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        calls.append(tuple((k, _frozen(v)) for k, v in list(bound.arguments.items())[1:]))
        return fn(*args, **kwargs)

    return counted


def _frozen(value):
    """``value`` as a hashable one: a list as a tuple, anything unhashable (a table) by its identity."""
    if isinstance(value, list):
        return tuple(value)
    try:
        hash(value)
    except TypeError:
        return f"<{type(value).__name__} at {id(value):#x}>"
    return value


def repeated(calls: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """The analyses computed more than once with the same arguments, and those arguments."""
    return {name: [a for a in set(args) if args.count(a) > 1] for name, args in calls.items()
            if len(set(args)) < len(args)}
