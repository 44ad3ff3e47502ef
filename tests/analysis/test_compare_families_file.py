"""``perfsight compare --families FILE`` reads FILE only when it is a regular file: a FIFO (or a device) is refused
with an error naming it, never waited on (issue "Nothing lost, nothing crashes", item 7)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.analysis.planted_pair import write_pair

SOURCE = Path(__file__).resolve().parents[2] / "src"


def test_a_fifo_as_the_families_file_is_refused_not_waited_on(tmp_path):
    base, new = write_pair(tmp_path / "pair")
    fifo = tmp_path / "families.csv"
    os.mkfifo(fifo)
    compared = subprocess.run([sys.executable, "-m", "perfsight", "compare", str(base), str(new), "--families",
                               str(fifo)], capture_output=True, text=True, timeout=120,   # a hang fails, never waits
                              env={**os.environ, "PYTHONPATH": str(SOURCE)})
    assert compared.returncode == 2 and "Traceback" not in compared.stderr
    assert compared.stderr.strip().splitlines()[-1] == (
        f"perfsight: error: {fifo}: a FIFO (named pipe), not a regular file; perfsight reads only regular files")
