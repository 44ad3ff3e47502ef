"""An unmodified inference script (no optimizer): perfsight must still profile the whole run."""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2)).eval()
with torch.no_grad():
    for _ in range(5):
        model(torch.randn(4, 16))
print("done", flush=True)
