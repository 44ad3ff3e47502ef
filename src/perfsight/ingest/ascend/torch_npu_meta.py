"""The facts of one torch_npu profile directory (``*_ascend_pt``/``*_ascend_ms``): its rank, world size,
device, communication groups and the profiler's own configuration, from ``profiler_info_{rank}.json``,
``profiler_metadata.json`` and the CSV exports' device column.

Owns:

* the rank: ``profiler_info``'s ``rank_id`` (when >= 0), else ``profiler_metadata``'s
  ``distributed_args.rank``, else the number in the ``profiler_info_{N}.json`` file name; None when
  nothing says;
* the device index: the first ``NPU:N`` of memory_record.csv / npu_module_mem.csv / operator_memory.csv
  (``Device Type`` / ``Device``), else kernel_details' ``Device_id``, else 0; its properties (``npu``,
  the ``chip_name`` when the profile says it);
* the communication groups (``groups``, hccl_groups.Group by the hash after ``@`` in communication
  operator names): ``parallel_group_info``'s (global ranks), else the group-local ranks its
  ``communication_matrix.json`` links name, marked local; and the matrix's links (``links``, meta
  ``communication_matrix``), both as hccl_groups reads them;
* the world size: ``distributed_args.world_size``, else the size of the largest group;
* the facts for meta (``FACT_KEYS``): the profiler's configuration, versions, environment variables.

A missing or unreadable JSON file is tolerated (the fact is unknown) and reported in ``warnings``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc

from perfsight.ingest.ascend.ascend_csv import read_csv, read_json
from perfsight.ingest.ascend.detect import OUTPUT_DIR, TEXT_FILES
from perfsight.ingest.ascend.hccl_groups import (
    Group,
    link_facts,
    local_groups,
    local_warning,
    matrix_links,
    parallel_groups,
    place_rank,
)

_INFO_NAME = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
_NPU = re.compile(r"NPU:?\s*(\d+)", re.IGNORECASE)
_VERSION_KEY = re.compile(r"version", re.IGNORECASE)


@dataclass
class Facts:
    rank: int | None = None
    device: int = 0
    world_size: int | None = None
    device_properties: list[dict] = field(default_factory=list)
    groups: dict[str, Group] = field(default_factory=dict)
    links: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_facts(run_dir: Path, rank: int | None, files: tuple[str, ...] = TEXT_FILES) -> Facts:
    """Everything above for ``run_dir``, from its profiler info and its files of ``OUTPUT_DIR`` named in
    ``files``; ``rank`` (when given) overrides the files'."""
    facts = Facts()
    named = ((p, _INFO_NAME.match(p.name)) for p in sorted(run_dir.glob("profiler_info*.json")))
    info_path, info_name = next(((p, name) for p, name in named if name), (None, None))
    info = _json(info_path, facts) if info_path else {}
    metadata_path = run_dir / "profiler_metadata.json"
    metadata = _json(metadata_path, facts) if metadata_path.is_file() else {}
    distributed = metadata.get("distributed_args")
    if not isinstance(distributed, dict):
        distributed = {}
    facts.rank = rank if rank is not None else _first_int(
        info.get("rank_id"), distributed.get("rank"), info_name.group(1) if info_name else None)
    facts.device = _device(run_dir / OUTPUT_DIR, files)
    chip = info.get("chip_name") or metadata.get("chip_name")
    facts.device_properties = [{"id": facts.device, "type": "npu",
                                "name": f"Ascend {chip}" if isinstance(chip, str) else "Ascend NPU"}]
    _groups(metadata.get("parallel_group_info"), run_dir / OUTPUT_DIR / "communication_matrix.json", facts)
    facts.world_size = _first_int(distributed.get("world_size"),
                                  max((len(g.ranks) for g in facts.groups.values()), default=None))
    facts.meta = {
        "profiler_config": info.get("config"),
        "profiler_info": {k: v for k, v in info.items() if k != "config"} or None,
        "environment": metadata.get("ENV_VARIABLES"),
        "framework_versions": {k: v for source in (info, metadata) for k, v in source.items()
                               if _VERSION_KEY.search(k) and isinstance(v, (str, int, float))} or None,
        "communication_groups": {h: g.facts() for h, g in facts.groups.items()} or None,
        "communication_matrix": facts.links or None,
    }
    return facts


def _json(path: Path, facts: Facts) -> dict:
    value = read_json(path, facts.warnings, "its facts are unknown")
    return value if isinstance(value, dict) else {}


def _first_int(*values) -> int | None:
    for value in values:
        try:
            number = int(value)
        except (TypeError, ValueError):
            continue
        if number >= 0:
            return number
    return None


def _device(output: Path, files: tuple[str, ...]) -> int:
    for name, column in (("memory_record.csv", "device_type"), ("npu_module_mem.csv", "device_type"),
                         ("operator_memory.csv", "device_type"), ("kernel_details.csv", "device_id")):
        path = output / name
        if name not in files or not path.is_file():
            continue
        table = read_csv(path, [], first_rows_only=True)    # the device is the same on every row (the reader warns)
        if column not in table.column_names:
            continue
        for text in pc.unique(table[column].drop_null()).to_pylist()[:8]:
            found = _NPU.search(text) if column == "device_type" else re.fullmatch(r"\s*(\d+)\s*", text)
            if found:
                return int(found.group(1))
    return 0


def _groups(info, matrix_path: Path, facts: Facts) -> None:
    """``facts.groups`` and ``facts.links``: parallel_group_info's groups, then the groups only the
    communication matrix names (group-local); its links with global ranks where mapped."""
    groups = parallel_groups(info, "profiler_metadata.json", facts.warnings)
    for name, group in groups.items():
        if facts.rank is not None and facts.rank not in group.ranks:
            facts.warnings.append(f"profiler_metadata.json: parallel_group_info's group {group.communicator} "
                                  f"({name}) holds ranks {group.ranks}, not this rank {facts.rank}")
    document = (read_json(matrix_path, facts.warnings, "its links and groups are unknown") if matrix_path.is_file()
                else None)
    links = matrix_links(document, matrix_path.name, facts.warnings)
    place_rank(groups, links, facts.rank)
    groups.update(local_groups(links, groups, facts.warnings, matrix_path.name))
    facts.groups, facts.links = groups, link_facts(links, groups)
    warning = local_warning(groups)
    if warning:
        facts.warnings.append(warning)
