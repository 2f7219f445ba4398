"""A training loader given a sampler of the program's own through ``sampler=`` (an episodic N-way K-shot sampler).

A trial's prototypical network read its episodes from ``DataLoader(ds, batch_size=n_way * (k + q),
sampler=EpisodeSampler(...))``. The review told the user to give each process ``per_process_batch_size(batch_size)``
samples: done literally, that cuts every episode across the ranks (``view(n_way, k + q, -1)`` fails, or the
prototypes are means of a fraction of the support set). The same loader given as ``batch_sampler=`` got the caveat;
now ``sampler=`` of the program's own class does too, and a library sampler drawing samples one by one does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Sampler, TensorDataset, WeightedRandomSampler


class EpisodeSampler(Sampler):
    def __init__(self, labels, n_way, shots, episodes):
        self.labels, self.n_way, self.shots, self.episodes = labels, n_way, shots, episodes

    def __len__(self):
        return self.episodes * self.n_way * self.shots

    def __iter__(self):
        for _ in range(self.episodes):
            for c in torch.randperm(int(self.labels.max()) + 1)[: self.n_way]:
                yield from (self.labels == c).nonzero().flatten()[torch.randperm(int((self.labels == c).sum()))[: self.shots]].tolist()


def main():
    x, y = torch.randn(200, 8), torch.arange(200) % 10
    loader = DataLoader(TensorDataset(x, y), batch_size=5 * 4, sampler=SAMPLER)
    net = nn.Linear(8, 4)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for xb, yb in loader:
        z = net(xb).view(5, 4, -1)
        prototypes = z[:, :2].mean(1)
        logits = -torch.cdist(z[:, 2:].reshape(10, -1), prototypes)
        loss = F.cross_entropy(logits, torch.arange(5).repeat_interleave(2))
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("sampler", "composed"),
    [("EpisodeSampler(y, 5, 4, 10)", True), ("WeightedRandomSampler(torch.ones(200), 200)", False)],
    ids=["programs-episodes", "library-weights"],
)
def test_a_sampler_of_the_programs_own_is_said_to_compose_its_batches(tmp_path: Path, sampler: str, composed: bool) -> None:
    migrated, report, _ = migrate_script(tmp_path, PROGRAM.replace("SAMPLER", sampler))
    todo = next(line for line in migrated.splitlines() if "own sampler is not sharded" in line)
    assert ("a share of each batch breaks them apart: have it compose each rank's own batches instead" in todo) is composed, todo
    review = next(line for line in report.splitlines() if "DDP005 training DataLoader with its own sampler" in line)
    assert ("a loss that compares the samples of a batch with each other" in review) is composed, review
