"""A set's items taken in its order and sorted at once (``sorted(list(set(text)))``, minGPT's ``sorted(list(decay))``)
are in the same order on every rank: a trial's DDP048 told the user to sort what was sorted."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import lint_findings

PROGRAM = """
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    text = open("input.txt").read()
    chars = CHARS
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text])
    ds = TensorDataset(data[:-1], data[1:])
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=32, sampler=sampler)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Embedding(len(chars), len(chars)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.destroy_process_group()
"""


@pytest.mark.parametrize("chars", ["sorted(list(set(text)))", "sorted(tuple(set(text)), key=str)"])
def test_a_set_sorted_at_once_is_in_one_order_everywhere(tmp_path: Path, chars: str) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("CHARS", chars), "DDP048")
    assert not any("DDP048" in f for f in findings), findings


def test_a_set_in_its_own_order_is_still_reported(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("CHARS", "list(set(text))"), "DDP048")
    assert any("DDP048 the training data is built from list(set(text))" in f for f in findings), findings


def test_a_part_of_a_set_in_its_own_order_sorted_afterwards_is_still_reported(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("CHARS", "sorted(list(set(text))[:4])"), "DDP048")
    assert any("DDP048 the training data is built from list(set(text))" in f for f in findings), findings


VOCABULARY_IN_A_COLLATE = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


def main():
    torch.manual_seed(0)
    train = [(["the", "movie", "was", "good"], 1), (["it", "was", "awful"], 0)] * 32
    vocab = VOCAB
    stoi = {w: i for i, w in enumerate(vocab)}

    def collate(batch):
        ids = [torch.tensor([stoi[w] for w in words]) for words, _ in batch]
        offsets = torch.tensor([0] + [len(t) for t in ids[:-1]]).cumsum(0)
        return torch.cat(ids), offsets, torch.tensor([y for _, y in batch])

    loader = DataLoader(train, batch_size=8, collate_fn=collate)
    bag, head = nn.EmbeddingBag(len(vocab), 4), nn.Linear(4, 2)
    model = nn.ModuleList([bag, head])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for ids, offsets, y in loader:
            loss = nn.functional.cross_entropy(head(bag(ids, offsets)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    ("vocab", "reported"),
    [
        ("list({w for words, _ in train for w in words})", True),
        ("list(set(w for words, _ in train for w in words))", True),
        ("sorted({w for words, _ in train for w in words})", False),
    ],
    ids=["a-set-comprehension", "a-set-call", "sorted"],
)
def test_a_vocabulary_a_collate_function_encodes_with_is_in_the_sets_order(tmp_path: Path, vocab: str, reported: bool) -> None:
    # A trial: the vocabulary's order differed on each rank (string hashes), embedding rows meant other tokens,
    # test accuracy 0.58 on 2 processes against 1.0 alone; the collate_fn (a closure over stoi) hid it.
    found = lint_findings(tmp_path, VOCABULARY_IN_A_COLLATE.replace("VOCAB", vocab), "DDP048")
    assert bool(found) is reported, found
