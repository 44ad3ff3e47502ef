"""A small MLP trained for 6 profiled steps, eager or under torch.compile (compiled and warmed up outside the
profile): the pair ``perfsight compare`` is tested on. ``python eager_or_compiled.py OUT eager|compiled``."""
import sys

import torch

import perfsight

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
forward = torch.compile(model) if sys.argv[2] == "compiled" else model
batch, target = torch.randn(32, 128), torch.randint(0, 10, (32,))


def step():
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(forward(batch), target).backward()
    optimizer.step()


for _ in range(2):                  # compile (and warm up) outside the profile
    step()
with perfsight.Profiler(output_path=sys.argv[1]) as prof:
    for _ in range(6):
        step()
        prof.step()
