"""A torch.compile'd model run for 3 profiled steps after compiling (for export's graph mode)."""
import sys

import torch

import perfsight

torch.set_num_threads(1)
model = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()))
model(torch.randn(4, 16))                      # compile outside the profile
with perfsight.Profiler(output_path=sys.argv[1]) as prof:
    for _ in range(3):
        model(torch.randn(4, 16))
        prof.step()
