"""The status file: how the script that tunes (autostart.py) or verifies (verify_script.py) tells the launcher
(launch.py) its outcome, as one JSON object: the launcher makes the file and names it in PERFSIGHT_TUNE's
``status``; the script writes it once; ``{"error": ...}`` says what failed."""
from __future__ import annotations

import json
from pathlib import Path

from perfsight.core.errors import PerfsightError


def write_status(config: dict, status: dict) -> None:
    """Write ``status`` to the file the launcher named in ``config``."""
    Path(config["status"]).write_text(json.dumps(status), encoding="utf-8")


def failure(exc: Exception) -> str:
    """What the status file says of a failure: a perfsight error's message, else the exception's type too."""
    return str(exc) if isinstance(exc, PerfsightError) else f"{type(exc).__name__}: {exc}"
