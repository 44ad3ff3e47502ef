"""Put on PYTHONPATH by ``perfsight run`` and ``perfsight tune``: start profiling (PERFSIGHT_OPTIONS) or
tuning (PERFSIGHT_TUNE), or apply a tuning bank (TUNE_BANK_PATH), in an unmodified script once it imports
torch (launch/torch_import.py), then hand over to any other sitecustomize the environment had."""
import os
import sys


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})
            return


try:
    from perfsight.collect.autostart import activate_from_env
    from perfsight.launch.torch_import import when_torch_imported
    from perfsight.tune.autostart import activate_from_env as activate_tuning_from_env
    from perfsight.tune.autostart import apply_bank_from_env
except ImportError:
    sys.stderr.write(f"perfsight: {sys.executable} cannot import perfsight, so this process is not profiled "
                     "or tuned; run the command with the Python perfsight is installed in\n")
else:
    when_torch_imported(activate_from_env, activate_tuning_from_env, apply_bank_from_env)
finally:
    _chain_next_sitecustomize()
