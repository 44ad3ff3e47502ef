"""perfsight: profile, analyse, show and tune deep-learning training and inference.

The Python API is the first surface:

    perfsight.Profiler(output_path=..., start_profile=True, **options)   collect (needs torch)
    perfsight.mark(name)                                                 a user range (msproftx)
    perfsight.open(path)                                                 a run and its analyses
    perfsight.load(path)                                                 a run's canonical tables
    perfsight.views.export(path, ...)                                          msprof-shaped files
    perfsight.cluster(path, output=None)                                 msprof-analyze's cluster outputs
    perfsight.compare(base, new)                                         two runs side by side
    perfsight.tune.tune(model, batch) or perfsight.tune_model(...)       operator tuning into a bank

Importing perfsight does not import torch; analysis-only use works without it.
"""
__version__ = "0.1.0"

_LAZY = {
    "Profiler": ("perfsight.collect.profiler", "Profiler"),
    "mark": ("perfsight.collect.marks", "mark"),
    "HuggingFaceCallback": ("perfsight.collect.callbacks", "HuggingFaceCallback"),
    "LightningCallback": ("perfsight.collect.callbacks", "LightningCallback"),
    "open": ("perfsight.run", "open"),
    "Run": ("perfsight.run", "Run"),
    "load": ("perfsight.run", "load"),
    "export": ("perfsight.views.export", "export"),
    "cluster": ("perfsight.views.export", "cluster"),
    "compare": ("perfsight.comparison", "compare"),
    "apply_bank": ("perfsight.tune.apply", "apply_bank"),
    "tuned": ("perfsight.tune.apply", "tuned"),
    "tune_model": ("perfsight.tune", "tune"),
    "PerfsightError": ("perfsight.core.errors", "PerfsightError"),
    "OptionError": ("perfsight.core.errors", "OptionError"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'perfsight' has no attribute {name!r}")
