"""One communication rule (core/communication.py): the reader's kinds, the kernel types of the breakdowns,
the collectives, the export's Communication layer and the web timeline's communication streams agree on a
planted trace of collective-library names, newer collectives (torch's symmetric memory, inference engines'
custom all-reduce, DeepEP), look-alikes (kernels that only reduce) and custom names."""
from __future__ import annotations

import json

import pytest

from perfsight.analysis.collectives import collectives
from perfsight.analysis.kernels import kernel_breakdown
from perfsight.analysis.timeline_index import TimelineIndex
from perfsight.ingest.kineto.reader import read_kineto
from perfsight.views.export import export_timeline

GPU, MAIN = 0, 100
#: device work, one stream each: (category, name)
DEVICE = [("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"), ("kernel", "NCCLKernel_Broadcast"),
          ("kernel", "ncclSymkDevKernel_AllReduce_AGxLL_R"),              # NCCL 2.27's symmetric kernels
          ("kernel", "rcclKernel_AllGather"), ("kernel", "hcclAllReduce"), ("kernel", "multimem_all_reduce_kernel"),
          ("kernel", "my_custom_allreduce"), ("kernel", "gemm_kernel"), ("gpu_memcpy", "ncclMemcpy_DtoD"),
          ("gpu_memset", "nccl_memset"),
          # newer collectives: torch's symmetric memory (NVLS), inference engines' custom all-reduce, DeepEP
          ("kernel", "void c10d::symmetric_memory::(anonymous namespace)::one_shot_all_reduce_kernel<float, 16, 8>"
                     "(float**, unsigned long, unsigned long, unsigned long, unsigned int**, unsigned long, "
                     "unsigned long)"),
          ("kernel", "void c10d::symmetric_memory::(anonymous namespace)::barrier_kernel(unsigned int**, int)"),
          ("kernel", "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
                     "vllm::Signal*, __nv_bfloat16*, int, int)"),
          ("kernel", "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(tensorrt_llm::kernels::"
                     "AllReduceParams)"),
          ("kernel", "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)"),
          # DeepEP-style expert-parallel kernels of another namespace, and NVSHMEM's
          ("kernel", "void moe::internode_ll::dispatch<false, 3, 7168>(void*, float*, int*, long*)"),
          ("kernel", "void moe::internode_ll::combine<3, 7168>(void*, int*, long*)"),
          ("kernel", "void moe::intranode::notify_dispatch<8>(int const*, int*, int, int*)"),
          ("kernel", "nvshmemi_transfer_rma_kernel"),
          ("kernel", "void at::native::index_put_kernel_dispatch<float>(float*)"),   # "dispatch" inside a name
          ("kernel", "mscclpp_AllGather_kernel"), ("kernel", "multimem_all_gather_kernel"),
          ("kernel", "void at_cuda_detail::cub::DeviceReduceKernel<float>(float*)"),    # only reduces: compute
          ("kernel", "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)"),
          ("kernel", "triton_red_fused_all_0")]
#: host work on the main thread: (category, name)
HOST = [("cpu_op", "c10d::allreduce_"), ("user_annotation", "nccl:all_reduce"), ("user_annotation", "rccl:all_gather"),
        ("user_annotation", "gloo:broadcast"), ("cpu_op", "record_param_comms"), ("user_annotation", "hccl:all_reduce"),
        ("user_annotation", "mpi:all_reduce"), ("user_annotation", "ucc:all_reduce"), ("cpu_op", "aten::mm"),
        ("cpu_op", "my_allreduce"), ("cpu_op", "multimem_all_reduce")]
COMPUTE_KERNELS = {"gemm_kernel", "void at_cuda_detail::cub::DeviceReduceKernel<float>(float*)",
                   "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)", "triton_red_fused_all_0",
                   "void at::native::index_put_kernel_dispatch<float>(float*)"}
COMMUNICATION = {name for category, name in DEVICE if category == "kernel" and name not in COMPUTE_KERNELS} | {
                 "c10d::allreduce_", "nccl:all_reduce", "rccl:all_gather", "gloo:broadcast", "record_param_comms"}
DEVICE_NAMES = {name for _, name in DEVICE}


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    events = [{"ph": "X", "cat": cat, "name": name, "pid": GPU, "tid": 10 + i, "ts": 1000 + 10 * i, "dur": 5,
               "args": {"stream": 10 + i, "device": GPU}} for i, (cat, name) in enumerate(DEVICE)]
    events += [{"ph": "X", "cat": cat, "name": name, "pid": MAIN, "tid": MAIN, "ts": 1000 + 10 * i, "dur": 5,
                "args": {}} for i, (cat, name) in enumerate(HOST)]
    path = tmp_path_factory.mktemp("communication") / "names.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return read_kineto([path])


def test_the_reader_classifies_by_the_rule(tables):
    slices = tables.slices.to_pylist()
    assert {s["name"] for s in slices if s["kind"] == "comm"} == COMMUNICATION
    assert {s["name"] for s in slices} == DEVICE_NAMES | {name for _, name in HOST}


def test_the_export_timeline_draws_the_same_slices_as_communication(tables, tmp_path):
    events = json.loads(export_timeline(tables, tmp_path, stamp="20240101000000")[0].read_text())["traceEvents"]
    layer = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {e["name"] for e in events if e["ph"] == "X" and layer[e["pid"]] == "Communication"} == COMMUNICATION


def test_the_web_timeline_groups_the_same_streams_as_communication(tables):
    names = {s["track_id"]: s["name"] for s in tables.slices.to_pylist()}       # one device task per stream
    groups = {g["name"]: {names[t["id"]] for t in g["tracks"]} for g in TimelineIndex(tables).tracks()["groups"]
              if g["name"] in ("communication", "device streams")}
    assert groups["communication"] == COMMUNICATION & DEVICE_NAMES
    assert groups["device streams"] == DEVICE_NAMES - COMMUNICATION


def test_the_kernel_types_and_the_collectives_read_the_same_rule(tables):
    kernels = kernel_breakdown(tables).to_pylist()
    assert {k["name"] for k in kernels if k["kernel_type"] == "COMMUNICATION"} == COMMUNICATION & DEVICE_NAMES
    assert {k["name"] for k in kernels} == DEVICE_NAMES
    found = collectives(tables).to_pylist()        # no collective metadata: the backends' host ranges
    assert sorted((c["source"], c["collective"]) for c in found) == [
        ("host annotation", "all_gather"), ("host annotation", "all_reduce"), ("host annotation", "broadcast")]
