"""Put on PYTHONPATH by ``perfsight run``: start profiling in an unmodified script, then hand over
to any other sitecustomize the environment had."""
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
except ImportError:
    sys.stderr.write(f"perfsight: {sys.executable} cannot import perfsight, so this process is not profiled; "
                     "run the command with the Python perfsight is installed in\n")
else:
    activate_from_env()
finally:
    _chain_next_sitecustomize()
