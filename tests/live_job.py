"""A real armed job in the test's own process, for the tests of what reads an armed job's files (insight's Live
page and its route): a tiny MLP trained under ``perfsight.Profiler(on_demand=True)``, its captures asked for by
``collect.capture.capture`` from a thread, as ``perfsight capture`` asks them."""
from __future__ import annotations

import threading
import time
from pathlib import Path

#: steps trained before the first capture is asked for, and after the last one lands
BEFORE, AFTER = 5, 5


def armed_training(root: Path, *, captures: int = 1, steps: int = 3, between=None) -> list:
    """Train armed into output folder ``root`` while ``captures`` captures of ``steps`` steps are taken one after
    the other (``between(i)`` is called after the i-th lands, before the next is asked); stops ``AFTER`` steps
    after the last and closes the job. Returns the captures (``capture.Captured``)."""
    import torch

    import perfsight
    from perfsight.collect.capture import capture

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    taken, failed = [], []

    def ask():
        try:
            for index in range(captures):
                taken.append(capture(root, steps=steps))
                if between is not None:
                    between(index)
        except Exception as error:  # noqa: BLE001 - raised in the test's thread below
            failed.append(error)

    asker = threading.Thread(target=ask, daemon=True)
    profiler = perfsight.Profiler(output_path=root, on_demand=True, data_process=False)
    deadline, step, after = time.monotonic() + 120, 0, 0
    while time.monotonic() < deadline and after < AFTER:
        loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(0.01)
        profiler.step()
        step += 1
        if step == BEFORE:
            asker.start()
        after += step > BEFORE and not asker.is_alive()
    profiler.close()
    asker.join(timeout=10)
    if failed:
        raise failed[0]
    assert len(taken) == captures, f"the job trained {step} steps; {len(taken)} of {captures} captures landed"
    return taken
