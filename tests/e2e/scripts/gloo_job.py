"""A small multi-process CPU job (torchrun, gloo) with a planted, known cause of waiting, for the cross-rank
verdicts' tests. Each step computes the same work on every rank, communicates, and ends with an optimizer step
(perfsight's step boundary).

Usage: gloo_job.py STEPS SHAPE [RANK MS]
  even           all_reduce of the gradients after equal work: no rank holds the others up
  sleeper R MS   as even, but rank R sleeps MS ms before each all_reduce: R is the straggler, the others wait
                 about MS per step
  early R MS     as even, but every rank except R sleeps MS ms before its forward (outside any collective):
                 R starts each step MS earlier and waits in the all_reduce; the others hold it up, and the
                 ranks' steps stay even (every step ends at the same collectives)
  ddp            DistributedDataParallel: the gradients all-reduced by DDP's hooks during backward
  pipeline R MS  rank 0 computes a stage and sends its activations to rank 1, which receives and computes the
                 next stage, then sends the gradient back (send/recv pairs); rank R sleeps MS ms before each
                 send: the other waits in its recv
Prints "step N" after each optimizer step.
"""
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

steps, shape = int(sys.argv[1]), sys.argv[2]
planted_rank, planted_ms = (int(sys.argv[3]), float(sys.argv[4])) if len(sys.argv) > 4 else (-1, 0.0)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
if shape == "ddp":
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)


def compute() -> None:
    optimizer.zero_grad()
    model(x).square().mean().backward()


def all_reduce_gradients() -> None:
    for p in model.parameters():
        dist.all_reduce(p.grad)


for step in range(steps):
    if shape == "early" and rank != planted_rank:
        time.sleep(planted_ms / 1000)
    if shape == "pipeline":
        optimizer.zero_grad()
        activations = torch.empty(64, 256)
        if rank == 0:
            activations = model(x)
            if rank == planted_rank:
                time.sleep(planted_ms / 1000)
            dist.send(activations.detach(), dst=1)
            grad = torch.empty(64, 256)
            dist.recv(grad, src=1)
            activations.backward(grad)
        else:
            dist.recv(activations, src=0)
            activations.requires_grad_(True)
            model(activations).square().mean().backward()
            if rank == planted_rank:
                time.sleep(planted_ms / 1000)
            dist.send(activations.grad, dst=0)
    elif shape == "ddp":
        compute()
    else:
        compute()
        if shape == "sleeper" and rank == planted_rank:
            time.sleep(planted_ms / 1000)
        all_reduce_gradients()
    optimizer.step()
    print(f"step {step}", flush=True)
dist.destroy_process_group()
