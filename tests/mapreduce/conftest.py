"""A two-node Ray cluster on this machine for the cluster tests (``two_nodes``): ``ray start --head`` plus a
second ``ray start --address``, one CPU each, in sessions of their own, stopped by killing only what they
started (``ray stop`` would stop every Ray on the machine)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


# --- Ray: a two-node cluster on this machine ------------------------------------------------------------

def ray_start(*args: str, temp_dir: Path) -> int:
    """`ray start ...` in a session of its own; the id of its process group, which every Ray process it
    leaves running (GCS, raylet, agents, workers) keeps."""
    ray = Path(sys.executable).with_name("ray")
    process = subprocess.Popen([str(ray), "start", *args, f"--temp-dir={temp_dir}", "--disable-usage-stats",
                                f"--dashboard-agent-listen-port={free_port()}"],
                               start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}",
                                    "RAY_AUTH_MODE": "disabled"})   # else a head finding ~/.ray/auth_token
                                                                    # wants a token the second node lacks
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    return process.pid


def ours(temp_dir: Path, groups: list[int]) -> list[psutil.Process]:
    """The processes the test's `ray start`s left: in their process groups or naming their temp dir."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if os.getpgid(process.pid) in groups or str(temp_dir) in " ".join(process.info["cmdline"] or ()):
                found.append(process)
        except (ProcessLookupError, psutil.Error):
            pass
    return found


def stop(temp_dir: Path, groups: list[int]) -> None:
    """Stop only what the test started (`ray stop` would stop every Ray on the machine)."""
    for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while ours(temp_dir, groups) and time.monotonic() < deadline:
            time.sleep(0.2)
    for process in ours(temp_dir, groups):   # not in the groups: still named by the temp dir
        process.kill()


@pytest.fixture(scope="class")
def two_nodes():
    """A head node and a second node, one CPU each, on this machine; their address."""
    import ray

    temp_dir = Path(f"/tmp/psray{os.getpid()}")   # short: Ray's socket paths must fit in 107 bytes
    port = free_port()
    groups: list[int] = []
    try:
        groups.append(ray_start("--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=1",
                                "--include-dashboard=false", f"--dashboard-port={free_port()}",
                                temp_dir=temp_dir))    # no --ray-client-server-port: the ray extra has no client
        groups.append(ray_start(f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                                temp_dir=temp_dir))
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        stop(temp_dir, groups)
        assert ours(temp_dir, groups) == []
        shutil.rmtree(temp_dir, ignore_errors=True)


