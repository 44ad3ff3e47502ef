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


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 1 MiB filesystem (tmpfs; needs the right to mount, as root in CI's container has)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def fill_disk(folder: Path) -> Path:
    """Fill the filesystem holding ``folder`` with a file of the user's (``filler.bin``) until it has no room."""
    filler = folder / "filler.bin"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(4096))
        except OSError:
            pass
    return filler
