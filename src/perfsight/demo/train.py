"""A plain PyTorch training script (it does not import perfsight): a small CNN on synthetic images.

perfsight profiles it without changes (`perfsight run -- python train.py`). The data set does a
little CPU work per sample, as real augmentation does, so the data loader shows up in the profile.
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    def __init__(self, size: int, image_size: int = 32, classes: int = 10):
        self.size, self.image_size, self.classes = size, image_size, classes

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        image = torch.rand(3, self.image_size, self.image_size, generator=g)
        image = (image - 0.5) / 0.25                      # "normalise", as a transform would
        if index % 2:
            image = torch.flip(image, dims=[2])           # "augment"
        return image, index % self.classes


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(SyntheticImages(args.steps * args.batch_size), batch_size=args.batch_size, shuffle=True)
    model.train()
    for step, (images, labels) in enumerate(loader):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
