"""An unmodified PyTorch training script for end-to-end tests: MLP, synthetic data, N steps.

Usage: train_tiny.py STEPS [SLEEP_S_PER_STEP] [--ddp] [--adam] [--wait-at STEP FILE]
Prints "step N" after each optimizer step (tests watch it to time a kill), then the sum of the final
weights and whether the optimizer still holds the model's parameters. With --wait-at, it waits after step STEP
until FILE exists (a test does something to the run then, such as filling its disk, without a race). With
--adam it trains with Adam, else with SGD.
"""
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

steps = int(sys.argv[1])
sleep_s = float(sys.argv[2]) if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else 0.0
ddp = "--ddp" in sys.argv
wait_at = (int(sys.argv[sys.argv.index("--wait-at") + 1]), sys.argv[sys.argv.index("--wait-at") + 2]) \
    if "--wait-at" in sys.argv else None
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
if ddp:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(model)
params = model.parameters()
optimizer = torch.optim.Adam(params) if "--adam" in sys.argv else torch.optim.SGD(params, lr=0.1)
data = TensorDataset(torch.randn(steps * 8, 32), torch.randint(0, 4, (steps * 8,)))
for step, (x, y) in enumerate(DataLoader(data, batch_size=8)):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    print(f"step {step}", flush=True)
    if wait_at and step == wait_at[0]:
        deadline = time.monotonic() + 120
        while not os.path.exists(wait_at[1]) and time.monotonic() < deadline:
            time.sleep(0.01)
    if sleep_s:
        time.sleep(sleep_s)
print(f"weights {sum(p.double().sum().item() for p in model.parameters()):.12f}", flush=True)
print("optimizer holds the model's parameters:",
      all(p is q for p, q in zip(model.parameters(), optimizer.param_groups[0]["params"])), flush=True)
if ddp:
    dist.destroy_process_group()
