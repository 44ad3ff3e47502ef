"""The data loader as a step setting: its signature and candidates, copies and settings put in place
(tune/loaders.py), its tuning in blocks of steps on a loader whose workers' savings are planted on a fake clock
(tune/loadat.py), and its winner applied from the next epoch (apply.AppliedLoaders)."""
import os
import time

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from perfsight.tune import loaders
from perfsight.tune.apply import apply_loaders
from perfsight.tune.bank import Bank, Entry
from perfsight.tune.capture import InputWait
from perfsight.tune.loadat import tune_loaders

#: what loading one item takes (s), and what the compute of one step takes (s): planted with sleeps, which
#: hold however busy the machine is
ITEM_S, COMPUTE_S = 0.004, 0.008


class SlowItems(torch.utils.data.Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, index):
        time.sleep(ITEM_S)
        return torch.full((3,), float(index))


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(8.0))


def compute() -> None:
    time.sleep(COMPUTE_S)


def test_a_loader_signature_is_its_data_and_batching_not_its_worker_settings():
    data = TensorDataset(torch.randn(10, 3))
    sig = loaders.signature(DataLoader(data, batch_size=4))
    assert sig == {"loader": "torch.utils.data.dataloader.DataLoader",
                   "dataset": "torch.utils.data.dataset.TensorDataset", "length": 10, "batch_size": 4,
                   "drop_last": False, "sampler": "torch.utils.data.sampler.SequentialSampler",
                   "collate_fn": "default_collate"}
    assert loaders.signature(DataLoader(data, batch_size=4, num_workers=2, pin_memory=True)) == sig
    assert loaders.signature(DataLoader(data, batch_size=4, shuffle=True))["sampler"].endswith("RandomSampler")
    assert loaders.describe(sig) == "TensorDataset x10, batch 4, SequentialSampler"
    assert loaders.tunable(DataLoader(data)) and not loaders.tunable(DataLoader(Stream()))


def test_the_candidates_are_every_worker_count_but_the_loaders_own():
    loader = DataLoader(TensorDataset(torch.randn(10, 3)), batch_size=4)
    counts = range(1, min(os.cpu_count() or 1, loaders.MAX_WORKERS) + 1)
    pin = torch.cuda.is_available()
    assert loaders.candidates(loader) == [
        (f"workers_{n}" + ("+pinned" if pin else ""),
         {"num_workers": n, "persistent_workers": True, "prefetch_factor": 2, "pin_memory": pin}) for n in counts]
    assert "workers_0" in [name for name, _ in loaders.candidates(DataLoader(loader.dataset, num_workers=1))]


def test_settings_put_on_a_loader_take_effect_at_its_next_epoch_and_an_epoch_under_way_keeps_its_workers():
    loader = DataLoader(SlowItems(), batch_size=4)
    own = loaders.settings(loader)
    assert own == {"num_workers": 0, "persistent_workers": False, "prefetch_factor": None, "pin_memory": False}
    loaders.put(loader, {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 2, "pin_memory": False})
    first = iter(loader)
    assert type(first).__name__ == "_MultiProcessingDataLoaderIter" and next(first).shape == (4, 3)
    assert iter(loader) is first                      # persistent: the same workers serve the next epoch
    loaders.put(loader, own)
    assert loader._iterator is None and next(first).shape == (4, 3)    # the epoch under way keeps its workers
    assert type(iter(loader)).__name__ == "_SingleProcessDataLoaderIter"
    del first
    copy = loaders.copied(loader, {**own, "num_workers": 1, "persistent_workers": True, "prefetch_factor": 2})
    assert copy is not loader and copy.dataset is loader.dataset and copy.batch_sampler is loader.batch_sampler
    assert loaders.settings(loader) == own


def waited_on(loader: DataLoader, share: float) -> InputWait:
    """What a recording that waited ``share`` of its span on ``loader`` saw."""
    name = f"{type(loader.dataset).__name__}, num_workers={loader.num_workers}"
    return InputWait(wait_ns=int(share * 1e9), span_ns=int(1e9), batches=4, loaders={name: 4},
                     sources={name: loader})


#: what a batch costs on the fake clock (us) with no worker or one (one process loads it either way), and
#: shared out among more; what a step's compute costs; the jitter added to the batches in turn
BATCH_US, STEP_US, JITTER_US = 16_000, 8_000, (0, 300, -200, 100)


class Clock:
    def __init__(self):
        self.now, self.batches = 0, 0

    def __call__(self) -> int:
        return self.now

    def compute(self) -> None:
        self.now += STEP_US * 1000


class ClockedCopy:
    """A copy of a loader (what ``loaders.copied`` makes) whose batches cost the fake clock what its worker count
    makes them cost: the time a loader's workers save, planted."""

    def __init__(self, loader: DataLoader, chosen: dict, clock: Clock):
        self.loader, self.clock = loader, clock
        self.num_workers, self.prefetch_factor = chosen["num_workers"], chosen["prefetch_factor"]

    def __iter__(self):
        for batch in iter(DataLoader(self.loader.dataset, batch_size=self.loader.batch_size)):
            self.clock.now += (BATCH_US // max(self.num_workers, 1) + JITTER_US[self.clock.batches % 4]) * 1000
            self.clock.batches += 1
            yield batch


def test_an_input_bound_loader_gets_the_most_workers_when_they_save_the_most_proven_in_blocks_of_steps(
        tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(loaders, "copied", lambda loader, chosen: ClockedCopy(loader, chosen, clock))
    loader = DataLoader(TensorDataset(torch.arange(48.0).reshape(16, 3)), batch_size=4)
    [done] = tune_loaders(waited_on(loader, 0.6), clock.compute, bank=Bank(tmp_path), timer=clock, rounds=8,
                          block=3)
    m = done.measurement
    most = min(os.cpu_count() or 1, loaders.MAX_WORKERS)
    assert done.op_name == "data loader 0 (TensorDataset)" and m.winner is not None
    assert (m.winner.params["num_workers"], m.winner.params["persistent_workers"]) == (most, True)
    # each copy's first batch is checked (a sequential sampler: values too) and timed as its start-up
    assert all(t.ok and t.compile_s is not None for t in m.candidates)
    assert m.default.median_us == pytest.approx(BATCH_US + STEP_US, abs=300)
    assert done.in_step["decision"] == "kept" and done.in_step["speedup_low"] > 1.0 and done.in_step["rounds"] == 8
    assert done.row()["what"] == "TensorDataset x16, batch 4, SequentialSampler"
    assert loaders.settings(loader)["num_workers"] == 0                     # the user's loader untouched
    [entry] = Bank(tmp_path).entries("step").values()
    assert entry.winner == m.winner.name and entry.signature == loaders.signature(loader)


def test_loaders_are_left_alone_when_the_steps_did_not_wait_or_their_dataset_is_iterable(tmp_path):
    loader = DataLoader(SlowItems(), batch_size=4)
    assert tune_loaders(waited_on(loader, 0.05), compute, bank=Bank(tmp_path)) == []
    assert tune_loaders(waited_on(DataLoader(Stream(), batch_size=2), 0.9), compute, bank=Bank(tmp_path)) == []


def planted(tmp_path, loader: DataLoader, chosen: dict) -> Bank:
    bank = Bank(tmp_path)
    sig = loaders.signature(loader)
    bank.put(Entry(key=bank.key("step", sig), kind="step", signature=sig, winner="workers_1", candidates=[
        {"name": "default", "params": {}}, {"name": "workers_1", "mode": "Schedule", "params": chosen}]),
        repeat=False)
    return Bank(tmp_path, bank.fingerprint, read_only=True)


def test_the_applied_winner_sets_the_loaders_workers_from_its_next_epoch_and_puts_them_back(tmp_path):
    loader = DataLoader(SlowItems(), batch_size=4)
    other = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4)         # another signature
    chosen = {"num_workers": 1, "persistent_workers": True, "prefetch_factor": 2, "pin_memory": False}
    applied = apply_loaders(planted(tmp_path, loader, chosen))
    try:
        assert applied.installed
        epoch = iter(loader)
        assert loaders.settings(loader) == chosen and type(epoch).__name__ == "_MultiProcessingDataLoaderIter"
        assert next(epoch).shape == (4, 3) and dict(applied.used) == {"workers_1": 1}
        iter(other)
        assert loaders.settings(other)["num_workers"] == 0
        applied.disable()
        assert loaders.settings(loader)["num_workers"] == 0 and loader._iterator is None
        assert type(iter(loader)).__name__ == "_SingleProcessDataLoaderIter"
    finally:
        applied.remove()
    assert DataLoader.__iter__.__qualname__ == "DataLoader.__iter__"


@pytest.mark.parametrize("params, problem", [
    ({"num_workers": -1, "persistent_workers": False, "prefetch_factor": None, "pin_memory": False},
     "Expected `int` >= 0 - at `$.num_workers`"),
    ({"num_workers": 1, "prefetch_factor": 2, "pin_memory": False}, "missing required field `persistent_workers`"),
])
def test_a_loader_winner_whose_settings_are_not_allowed_is_refused_naming_the_entry(tmp_path, params, problem):
    from perfsight.core.errors import TuneBankError

    loader = DataLoader(SlowItems(), batch_size=4)
    with pytest.raises(TuneBankError, match=r"step\.json is damaged: entry '\d+': its winner 'workers_1' has params .*"
                                            + problem.replace("$", r"\$").replace("[", r"\[")):
        apply_loaders(planted(tmp_path, loader, params))


class Augmented(SlowItems):
    """Items drawn at random, as augmentation draws them: a worker's random numbers are its own."""

    def __getitem__(self, index):
        time.sleep(ITEM_S)
        return torch.randn(3) + index


class Reshaped(SlowItems):
    """Items whose shape depends on the process loading them: a wrong candidate, planted."""

    def __getitem__(self, index):
        time.sleep(ITEM_S)
        return torch.zeros(3 if torch.utils.data.get_worker_info() is None else 4)


def test_the_check_compares_values_only_where_the_loader_gives_them_every_time(tmp_path):
    # random items: values differ in a worker by design, so only their structure is checked
    [done] = tune_loaders(waited_on(DataLoader(Augmented(), batch_size=4), 0.6), compute, bank=Bank(tmp_path),
                          rounds=2, block=1)
    assert all(t.ok for t in done.measurement.candidates)
    # a structure that changes in a worker is refused, whatever the sampler
    [done] = tune_loaders(waited_on(DataLoader(Reshaped(), batch_size=4, shuffle=True), 0.6), compute,
                          bank=Bank(tmp_path / "other"), rounds=2, block=1)
    assert [t.reason.startswith("its batches differ in structure") for t in done.measurement.candidates] == \
        [True] * len(done.measurement.candidates) and done.measurement.winner is None


def test_a_script_bank_keeps_the_loader_winner_on_through_its_switches_until_it_is_closed(tmp_path):
    from perfsight.tune.scriptbank import ScriptBank

    loader = DataLoader(SlowItems(), batch_size=4)
    chosen = {"num_workers": 1, "persistent_workers": True, "prefetch_factor": 2, "pin_memory": False}
    planted(tmp_path, loader, chosen)
    applied = ScriptBank(torch.nn.Linear(3, 2), tmp_path)   # a loader winner alone is a bank to apply
    assert "data-loader winners (from each loader's next epoch)" in applied.describe()
    applied.switch(True)
    applied.switch(False)              # a check's untuned step: a loader's epoch is not switched step by step
    epoch = iter(loader)
    assert loaders.settings(loader) == chosen and dict(applied.used) == {"workers_1": 1}
    applied.close()                    # the guard gave up, or --verify ended: untuned from the next epoch
    assert loaders.settings(loader)["num_workers"] == 0 and next(epoch).shape == (4, 3)
    assert DataLoader.__iter__.__qualname__ == "DataLoader.__iter__"
