"""A small conv + attention + linear model shared by the tune tests."""
import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class Small(torch.nn.Module):
    """conv -> depthwise conv -> attention over the pixels -> linear head."""

    def __init__(self, channels: int = 16, heads: int = 2, classes: int = 10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.dw = torch.nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.attn = Attention(channels, heads)
        self.head = torch.nn.Linear(channels, classes)

    def forward(self, x):
        x = torch.relu(self.dw(torch.relu(self.conv1(x))))
        tokens = x.flatten(2).transpose(1, 2)
        return self.head(self.attn(tokens).mean(1))


def example(batch: int = 2, size: int = 8, seed: int = 0):
    torch.manual_seed(seed)
    return Small(), torch.randn(batch, 3, size, size)
