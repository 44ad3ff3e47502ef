"""Hand-built steps whose critical paths are known by construction (times are ``BASE`` + offsets, ns).

``device_bound()``: one ProfilerStep [0, 10000) on rank 0. Main thread: aten::mm [100, 400) >
cudaLaunchKernel [200, 300) (corr 1); aten::add [400, 600) > cudaLaunchKernel [450, 550) (corr 2);
cudaStreamSynchronize [700, 9000); aten::item [9000, 9800). Stream 7: gemm [300, 6000) (corr 1: launched on
an idle stream, 100 after its call began: the rank's launch latency), add_kernel [6000, 8800) (corr 2: queued
behind gemm). The path: idle 100, aten::mm 100, the launch 100, gemm 5700, add_kernel 2800, the sync's return
200, aten::item 800, idle 200 (sum 10000).

``two_threads()``: one ProfilerStep [0, 5000), no device. Main thread: forward [100, 1000), nothing [1000, 4000)
(sitting in loss.backward()), optimizer [4000, 4800). Autograd thread: backward_a [1100, 2000), backward_b
[2100, 3900). The path: idle 100, forward 900, hand-off 100, backward_a 900, the autograd thread's gap 100,
backward_b 1800, hand-off 100, optimizer 800, idle 200 (sum 5000).

``two_streams()``: one ProfilerStep [0, 4000). Main thread: cudaLaunchKernel [100, 150) (corr 1),
cudaEventRecord [160, 170) (corr 11), cudaStreamWaitEvent [180, 190) (corr 12), cudaLaunchKernel [200, 250)
(corr 2), cudaDeviceSynchronize [400, 3100), cudaLaunchKernel [3450, 3460) (corr 4), cudaLaunchKernel
[3500, 3600) (corr 3). Stream 7: producer [150, 2000) (corr 1), skewed [3300, 3400) (corr 4: it starts before
its launch call began, the host's and device's clocks apart: that launch edge is dropped), late [3550, 3700)
(corr 3). Stream 8: Kineto's Stream Wait Event (corr 12: stream 8 waits for stream 7's event recorded by
cudaEventRecord 11), consumer [2000, 3000) (corr 2). The path: idle 100, the launch 50, producer 1850, the
event wait 0, consumer 1000, the sync's return 100, then the main thread to the end: idle 350,
cudaLaunchKernel 10, idle 40, cudaLaunchKernel 100, idle 400 (sum 4000).

``comm_wait()``: one ProfilerStep [0, 5000), no ``Stream Wait Event`` records (as older PyTorch writes). Main
thread: cudaLaunchKernel [100, 150) (corr 1), cudaLaunchKernel [200, 250) (corr 2), cudaDeviceSynchronize [300,
4100). Stream 8: ncclKernel_SendRecv [150, 3000) (corr 1); stream 7: consumer [3005, 4000) (corr 2: launched at
200, it starts 5 ns after the NCCL kernel of the other stream ended: it waited for it). The path: idle 100, the
launch 50, ncclKernel_SendRecv 2850 (communication), the stream wait 5, consumer 995, the sync's return 100,
idle 900 (sum 5000).
"""
from __future__ import annotations

import json

from perfsight.core.tables import RunTables

from .planted import BASE, MAIN, STREAM, TRACKS, _slice, tables_from_rows

AUTOGRAD, STREAM_8 = TRACKS[1]["track_id"], 5
STREAM_8_TRACK = {**TRACKS[2], "track_id": STREAM_8, "tid": "8", "name": "cuda:0 stream 8", "sort_index": 8}


def device_bound() -> RunTables:
    s = _slice
    return tables_from_rows(slices=[
        s(1, "step", "ProfilerStep#1", MAIN, 0, 10000, 0, step=1),
        s(2, "cpu_op", "aten::mm", MAIN, 100, 400, 1, parent=1, step=1),
        s(3, "runtime", "cudaLaunchKernel", MAIN, 200, 300, 2, parent=2, step=1, correlation_id=1),
        s(4, "cpu_op", "aten::add", MAIN, 400, 600, 1, parent=1, step=1),
        s(5, "runtime", "cudaLaunchKernel", MAIN, 450, 550, 2, parent=4, step=1, correlation_id=2),
        s(6, "sync", "cudaStreamSynchronize", MAIN, 700, 9000, 1, parent=1, step=1),
        s(7, "cpu_op", "aten::item", MAIN, 9000, 9800, 1, parent=1, step=1),
        s(20, "kernel", "gemm", STREAM, 300, 6000, 0, step=1, correlation_id=1),
        s(21, "kernel", "add_kernel", STREAM, 6000, 8800, 0, step=1, correlation_id=2),
    ], tracks=[TRACKS[0], TRACKS[2]])


def two_threads() -> RunTables:
    s = _slice
    return tables_from_rows(slices=[
        s(1, "step", "ProfilerStep#1", MAIN, 0, 5000, 0, step=1),
        s(2, "cpu_op", "forward", MAIN, 100, 1000, 1, parent=1, step=1),
        s(3, "cpu_op", "optimizer", MAIN, 4000, 4800, 1, parent=1, step=1),
        s(4, "cpu_op", "backward_a", AUTOGRAD, 1100, 2000, 0, step=1),
        s(5, "cpu_op", "backward_b", AUTOGRAD, 2100, 3900, 0, step=1),
    ], tracks=TRACKS[:2])


def two_streams() -> RunTables:
    s = _slice
    wait = json.dumps({"cuda_sync_kind": "Stream Wait Event", "stream": 8, "wait_on_stream": 7,
                       "wait_on_cuda_event_record_corr_id": 11})
    return tables_from_rows(slices=[
        s(1, "step", "ProfilerStep#1", MAIN, 0, 4000, 0, step=1),
        s(2, "runtime", "cudaLaunchKernel", MAIN, 100, 150, 1, parent=1, correlation_id=1),
        s(3, "runtime", "cudaEventRecord", MAIN, 160, 170, 1, parent=1, correlation_id=11),
        s(4, "runtime", "cudaStreamWaitEvent", MAIN, 180, 190, 1, parent=1, correlation_id=12),
        s(5, "runtime", "cudaLaunchKernel", MAIN, 200, 250, 1, parent=1, correlation_id=2),
        s(6, "sync", "cudaDeviceSynchronize", MAIN, 400, 3100, 1, parent=1),
        s(7, "runtime", "cudaLaunchKernel", MAIN, 3450, 3460, 1, parent=1, correlation_id=4),
        s(8, "runtime", "cudaLaunchKernel", MAIN, 3500, 3600, 1, parent=1, correlation_id=3),
        s(20, "kernel", "producer", STREAM, 150, 2000, 0, correlation_id=1),
        s(21, "sync", "Stream Wait Event", STREAM_8, 185, 186, 0, correlation_id=12, args=wait),
        s(22, "kernel", "consumer", STREAM_8, 2000, 3000, 0, correlation_id=2),
        s(23, "kernel", "skewed", STREAM, 3300, 3400, 0, correlation_id=4),
        s(24, "kernel", "late", STREAM, 3550, 3700, 0, correlation_id=3),
    ], tracks=[TRACKS[0], TRACKS[2], STREAM_8_TRACK])


def comm_wait(recorded: bool = False) -> RunTables:
    """``recorded``: the rank's trace records its stream waits (one, of stream 7 on an event of stream 9
    recorded outside the step), so a wait it does not record did not happen."""
    s = _slice
    wait = json.dumps({"cuda_sync_kind": "Stream Wait Event", "stream": 7, "wait_on_stream": 9,
                       "wait_on_cuda_event_record_corr_id": 99})
    return tables_from_rows(slices=[
        s(1, "step", "ProfilerStep#1", MAIN, 0, 5000, 0, step=1),
        s(2, "runtime", "cudaLaunchKernel", MAIN, 100, 150, 1, parent=1, correlation_id=1),
        s(3, "runtime", "cudaLaunchKernel", MAIN, 200, 250, 1, parent=1, correlation_id=2),
        s(4, "sync", "cudaDeviceSynchronize", MAIN, 300, 4100, 1, parent=1),
        s(20, "comm", "ncclKernel_SendRecv", STREAM_8, 150, 3000, 0, correlation_id=1),
        s(21, "kernel", "consumer", STREAM, 3005, 4000, 0, correlation_id=2),
    ] + ([s(22, "sync", "Stream Wait Event", STREAM, 60, 61, 0, correlation_id=98, args=wait)] if recorded else []),
        tracks=[TRACKS[0], TRACKS[2], STREAM_8_TRACK])


def at(offset: int) -> int:
    """A planted time as the tables hold it."""
    return BASE + offset
