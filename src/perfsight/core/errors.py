"""perfsight's user-facing errors: each names the key or file, the value and what is allowed."""


class PerfsightError(Exception):
    """Base of every error perfsight reports to a user (the CLI prints it without a traceback)."""


class OptionError(PerfsightError, ValueError):
    """An option (from the API, PERFSIGHT_OPTIONS, PROFILING_OPTIONS, MS_PROFILER_OPTIONS or the CLI) is invalid."""


class InputError(PerfsightError):
    """A file or directory given to perfsight cannot be read as a run."""


class InputErrorAt(InputError):
    """An InputError about one place (a file, a file and its key): ``<where>: <reason>``, its ``reason`` kept
    apart for a caller that names the place itself."""

    reason = ""

    @classmethod
    def at(cls, where: object, reason: str):
        error = cls(f"{where}: {reason}")
        error.reason = reason
        return error


class OutputError(PerfsightError):
    """perfsight cannot write where it was asked to: a special file or a file in place of a folder, a
    read-only folder, a user's file in the way, or a write that failed (disk full)."""


class TuneBankError(PerfsightError):
    """A tuning bank cannot be used as asked: it is read-only, stale (tuned under other library versions) or
    unreadable."""


class TunePreconditionError(PerfsightError):
    """A precondition of tuning does not hold (profiling on, dynamic shapes, too little disk or memory)."""
