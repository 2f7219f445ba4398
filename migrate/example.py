"""Example training scripts bundled with the command line (``ddp-migrate example``), to try the tool on.

They live here as text, so they are there after any ``pip install``, with no data files to find. Each is
a small, complete script that trains in a few seconds on a CPU and that ``ddp-migrate`` migrates into a
program that runs as ``python train.py`` and under ``torchrun``.
"""

from __future__ import annotations

DATAPARALLEL = '''\
"""A small classifier trained with nn.DataParallel: the kind of script ddp-migrate rewrites."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = 3
BATCH_SIZE = 32
SAVE_DIR = "checkpoints"


class Classifier(nn.Module):
    def __init__(self, in_features=8, num_classes=2):
        super().__init__()
        self.num_classes = num_classes
        self.hidden = nn.Linear(in_features, 32)
        self.out = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.out(F.relu(self.hidden(x)))


def synthetic_data(n=256, d=8):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return TensorDataset(x, y)


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    dataset = synthetic_data()
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)

    model = Classifier()
    model = nn.DataParallel(model)
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    os.makedirs(SAVE_DIR, exist_ok=True)

    for epoch in range(EPOCHS):
        model.train()
        total = 0.0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch}: loss {total / len(loader):.4f}")
        torch.save(model.module.state_dict(), os.path.join(SAVE_DIR, "model.pt"))

    print(f"done: {model.module.num_classes} classes, weights in {SAVE_DIR}/model.pt")


if __name__ == "__main__":
    main()
'''

#: The bundled examples by name; the first is the default.
EXAMPLES: dict[str, tuple[str, str]] = {
    "dataparallel": ("a small classifier trained with nn.DataParallel (the default)", DATAPARALLEL),
}

DEFAULT = "dataparallel"


def example(name: str = DEFAULT) -> str:
    """The source of a bundled example; ``KeyError`` for a name that is not one."""
    return EXAMPLES[name][1]
