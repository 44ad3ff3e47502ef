"""Helpers for end-to-end tests: run the perfsight CLI and unmodified scripts in subprocesses."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPTS = Path(__file__).parent / "scripts"


def perfsight(*args, env=None, cwd=None, timeout=240):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "perfsight", *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


def script(name):
    return str(SCRIPTS / name)


def manifest(run_dir):
    return json.loads((Path(run_dir) / "manifest.json").read_text())


def run_dirs(root):
    return sorted(p for p in Path(root).iterdir() if p.name.startswith("PROF_"))
