"""``perfsight export``'s own option values (msprof export's, seed 003): the step mode's model id and the
formats of the summary files, defined and checked once for the CLI, ``perfsight.export`` and the summary
export."""
from __future__ import annotations

from perfsight.core.errors import OptionError

#: ``--model-id`` of msprof's step mode ("--model-id=4294967295,为Step模式"): iterations are training steps
STEP_MODEL_ID = 4294967295
#: ``--format``: the formats of the summary files
EXPORT_FORMATS = ("csv", "json")


def check_export_format(fmt: object) -> str:
    """``fmt`` when it is one of ``EXPORT_FORMATS``; else an OptionError naming ``--format``, the value and what
    is allowed."""
    if fmt not in EXPORT_FORMATS:
        raise OptionError(f"--format: {fmt!r} is not allowed; allowed: {', '.join(EXPORT_FORMATS)}")
    return str(fmt)
