"""The DataLoader's worker settings as a setting of the training step: a bank signature per loader, the
settings to try, a copy of a loader under them, and setting them on the loader itself.

A map-style dataset's batches do not depend on how many processes load them: the sampler decides the
indices and the collate function the batch, in the main process, whatever ``num_workers`` is. So a loader's
``num_workers``, ``persistent_workers``, ``prefetch_factor`` and ``pin_memory`` (``SETTINGS``) may change
and train the same; an iterable dataset's may not (each worker runs the whole iterable unless the dataset
shards itself), so those loaders are not tuned. A loader's settings take effect when an iterator is made
from it - an epoch's start - so ``put`` changes them for the next one; an epoch under way keeps its workers
to its end.

``signature(loader)`` is what a winner is keyed by: the dataset's class and length, the batch size, whether
the last batch is dropped, the sampler's class and the collate function - not the settings tuned.
``candidates(loader)`` are the settings to try: each worker count from none to the CPU count (at most
``MAX_WORKERS``) but the loader's own, with workers kept between epochs (persistent) and, on a CUDA machine,
pinned memory.
"""
from __future__ import annotations

import os

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset

SETTINGS = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory")
#: the most worker processes tried (each is a copy of the training process)
MAX_WORKERS = 8


def _class(value) -> str:
    """``value``'s class, named in full."""
    return f"{type(value).__module__}.{type(value).__qualname__}"


def tunable(loader: DataLoader) -> bool:
    """Whether ``loader``'s batches stay the same under other settings: a map-style dataset."""
    return not isinstance(loader.dataset, IterableDataset)


def signature(loader: DataLoader) -> dict:
    """The bank signature of ``loader`` (module docstring)."""
    index = loader._index_sampler
    batches = isinstance(index, BatchSampler)
    try:
        length = len(loader.dataset)
    except TypeError:
        length = None
    return {"loader": _class(loader), "dataset": _class(loader.dataset), "length": length,
            "batch_size": index.batch_size if batches else loader.batch_size,
            "drop_last": index.drop_last if batches else loader.drop_last,
            "sampler": _class(index.sampler if batches else index),
            "collate_fn": getattr(loader.collate_fn, "__qualname__", None) or _class(loader.collate_fn)}


def describe(sig: dict) -> str:
    """A signature in a few words, for a row of the tuning result."""
    return (f"{sig['dataset'].rsplit('.', 1)[-1]} x{sig['length']}, batch {sig['batch_size']}, "
            f"{sig['sampler'].rsplit('.', 1)[-1]}")


def settings(loader: DataLoader) -> dict:
    """``loader``'s ``SETTINGS`` as they are."""
    return {name: getattr(loader, name) for name in SETTINGS}


def candidates(loader: DataLoader) -> list[tuple[str, dict]]:
    """(name, settings) of each candidate (module docstring)."""
    pin = torch.cuda.is_available()
    found = []
    for workers in range(0, min(os.cpu_count() or 1, MAX_WORKERS) + 1):
        if workers == loader.num_workers:
            continue
        chosen = {"num_workers": workers, "persistent_workers": workers > 0,
                  "prefetch_factor": (loader.prefetch_factor or 2) if workers else None,
                  "pin_memory": pin or loader.pin_memory}
        found.append((f"workers_{workers}" + ("+pinned" if chosen["pin_memory"] else ""), chosen))
    return found


def copied(loader: DataLoader, chosen: dict) -> DataLoader:
    """A loader of the same dataset, sampler, collate function and worker hooks as ``loader``, under the
    settings ``chosen``."""
    index = loader._index_sampler
    batching = {"batch_sampler": index} if loader._auto_collation else {"batch_size": None, "sampler": index}
    return DataLoader(loader.dataset, **batching, collate_fn=loader.collate_fn, timeout=loader.timeout,
                      worker_init_fn=loader.worker_init_fn, generator=loader.generator,
                      multiprocessing_context=loader.multiprocessing_context if chosen["num_workers"] else None,
                      pin_memory_device=loader.pin_memory_device, in_order=loader.in_order, **chosen)


def put(loader: DataLoader, chosen: dict) -> None:
    """Set ``chosen`` (``SETTINGS``) on ``loader`` for its next iterator. The loader lets go of a persistent
    iterator made under other settings: an epoch under way keeps its workers to its end, and they stop when
    its iterator is dropped."""
    if settings(loader) == chosen:
        return
    loader._iterator = None
    for name, value in chosen.items():
        object.__setattr__(loader, name, value)   # DataLoader refuses persistent_workers after its __init__
