"""Readers of Ascend's own profiler output into the canonical tables: torch_npu (its text files,
``torch_npu_*``, or its SQLite .db, ``torch_npu_db*``), msprof PROF_ directories (``msprof_*``) and
MindSpore's legacy flat folder (``mindspore_*``), with what they share (``ascend_*``: CSV helpers, kind
tables). Recognising them by name: ``detect``; their ``Reader`` classes, listed in
``perfsight.ingest.registry``: ``formats``."""
