"""A training loader given a batch sampler of the program (P classes x K samples for a triplet loss, a trial): the
review asked for ``batch_size=runtime.per_process_batch_size(batch_size)``, which a ``batch_sampler=`` loader has
no place for, and said nothing of the in-batch mining that sharding the batches shrinks."""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

PROGRAM = """
import random

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Sampler, TensorDataset


class PKBatchSampler(Sampler):
    def __init__(self, labels, p, k):
        self.labels, self.p, self.k = labels, p, k

    def __iter__(self):
        classes = sorted(set(self.labels.tolist()))
        for _ in range(len(self)):
            chosen = random.sample(classes, self.p)
            yield [i for c in chosen for i in random.sample([j for j, l in enumerate(self.labels.tolist()) if l == c], self.k)]

    def __len__(self):
        return 4


def main():
    labels = torch.arange(64) % 8
    data = TensorDataset(torch.randn(64, 4), labels)
    loader = DataLoader(data, batch_sampler=PKBatchSampler(labels, 4, 4))
    model = nn.Linear(4, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            emb = model(x)
            dist = torch.cdist(emb, emb)
            loss = dist[y[:, None] == y[None, :]].mean() - dist[y[:, None] != y[None, :]].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


def test_a_batch_sampler_of_the_program_is_reviewed_with_what_sharding_its_batches_does(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, PROGRAM)
    assert code == 1, report
    assert "DDP005 training DataLoader with its own batch sampler is not sharded across processes" in report, report
    assert "a loss that compares the samples of a batch with each other then sees N times fewer" in report, report
    assert "# TODO(ddp-migrate): this training loader's own batch sampler is not sharded" in text, text
    assert "per_process_batch_size" not in text, text
