import pytest

from perfsight.collect.autostart import is_helper_process


@pytest.mark.parametrize("argv, helper", [
    (["/usr/bin/python3", "train.py"], False),
    (["/usr/bin/python3", "-m", "mypkg.train"], False),
    (["/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc-per-node=2", "train.py"], True),
    (["/usr/bin/python3", "-m", "torch.distributed.run", "train.py"], True),
    (["/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"], True),
    (["/usr/bin/python3", "/venv/bin/perfsight", "run", "--", "python", "x.py"], True),
    (["/usr/bin/python3", "-m", "perfsight", "export"], True),
    (["/usr/bin/python3", "/venv/lib/python3.11/site-packages/torch/_inductor/compile_worker/__main__.py",
      "--pickler=torch._inductor.compile_worker.subproc_pool.SubprocPickler", "--kind=fork", "--workers=2"], True),
])
def test_launchers_and_workers_are_not_profiled(argv, helper):
    assert is_helper_process(argv) is helper
