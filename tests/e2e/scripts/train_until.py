"""An unmodified PyTorch training script that trains until told to stop, for armed-job tests.

Usage: train_until.py STOP_FILE [--sleep S] [--slow-at STEP --slow-s S] [--max-steps N] [--ddp]
Trains an MLP on synthetic batches, one optimizer step per step, sleeping S seconds a step (default 0.02),
S more after step --slow-at (a planted slow step), until STOP_FILE exists, N steps are done (default 100000)
or 300 s have passed. Prints "step N" after each step and "trained N steps" at the end.
"""
import argparse
import os
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("stop")
parser.add_argument("--sleep", type=float, default=0.02)
parser.add_argument("--slow-at", type=int, default=-1)
parser.add_argument("--slow-s", type=float, default=0.5)
parser.add_argument("--max-steps", type=int, default=100000)
parser.add_argument("--ddp", action="store_true")
args = parser.parse_args()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
if args.ddp:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
deadline = time.monotonic() + 300
step = 0
while step < args.max_steps and time.monotonic() < deadline:
    x, y = torch.randn(8, 32), torch.randint(0, 4, (8,))
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    print(f"step {step}", flush=True)
    time.sleep(args.sleep + (args.slow_s if step == args.slow_at else 0.0))
    step += 1
    stop = os.path.exists(args.stop)
    if args.ddp:           # every rank stops after the same step
        flag = torch.tensor([1.0 if stop else 0.0])
        dist.all_reduce(flag)
        stop = flag.item() > 0
    if stop:
        break
print(f"trained {step} steps", flush=True)
if args.ddp:
    dist.destroy_process_group()
