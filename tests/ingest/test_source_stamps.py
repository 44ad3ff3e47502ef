"""A run's raw files are stamped in one place (cache.source_stamps): the cache's fingerprint and insight's run
list, which re-reads a run whose stamp changed, see the same paths, sizes and times."""
from __future__ import annotations

import shutil

from perfsight.ingest import cache
from perfsight.views.insight.discovery import discover
from tests.conftest import copy_shared


def test_insight_and_the_cache_stamp_a_run_alike(shared_data, tmp_path):
    copy_shared(shared_data / "ascend/torch_npu/text/level1/rank0_ascend_pt", tmp_path / "rank0_ascend_pt")
    shutil.copy(shared_data / "kineto/hta/trace_compare/base/base.json.gz", tmp_path / "base.json.gz")
    candidates = discover(tmp_path)
    assert len(candidates) == 2 and all(len(c.sources) for c in candidates)
    for candidate in candidates:
        stamps = cache.fingerprint(list(candidate.sources))["sources"]
        assert [list(stamp) for stamp in candidate.fingerprint()] == [stamp[:3] for stamp in stamps]
        assert candidate.size_bytes() == sum(stamp[1] for stamp in stamps)
