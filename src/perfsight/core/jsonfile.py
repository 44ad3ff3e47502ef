"""Whole-file JSON and text writes (the run manifest, the tuning bank and its TunableOp results, the tuning result
files, an armed job's live files): a reader sees the old file or the new one, never a torn one (temp file,
os.replace), and a finished write survives a crash (fsync of the file and of the directory) unless the caller says
it need not: a file rewritten every second whose next copy is coming anyway (an armed rank's status)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_json_atomic(path: Path, data: dict, *, indent: int = 1, sort_keys: bool = True,
                      durable: bool = True) -> None:
    """Replace ``path`` with ``data`` as JSON (values JSON cannot hold are written as their str); ``durable``:
    synced to disk before and after the replacement (module docstring)."""
    write_text_atomic(path, json.dumps(data, indent=indent, sort_keys=sort_keys, ensure_ascii=False, default=str),
                      durable=durable)


def write_text_atomic(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` (UTF-8), as ``write_json_atomic`` does."""
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    if not durable:
        return
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
