"""A training loader over an iterable-style dataset cannot take a sampler (DataLoader refuses one, and the
migrated program crashed at start): DDP005 leaves it alone and asks a human to shard the stream, also when
the dataset class comes from another module of the program through a base class of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_python

STREAMS = '''
import torch
from torch.utils.data import IterableDataset


class Base(IterableDataset):
    pass


class Synthetic(Base):
    def __iter__(self):
        while True:
            yield torch.randn(4), torch.randn(1)
'''

TRAIN = '''
import torch
from torch.utils.data import DataLoader

from streams import Synthetic


def main():
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Synthetic(), batch_size=8)
    for step, (x, y) in enumerate(loader):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if step == 3:
            break


if __name__ == "__main__":
    main()
'''


def test_a_stream_from_another_module_is_left_to_a_human_and_the_program_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("streams.py").write_text(STREAMS)
    Path("train.py").write_text(TRAIN)
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    migrated = Path("train.py").read_text()
    assert "DistributedSampler" not in migrated
    assert "review train.py:" in result.output and "DDP005 training DataLoader over an IterableDataset" in result.output
    assert "# TODO(ddp-migrate): this IterableDataset streams the same samples to every process" in migrated
    assert "DistributedSampler" not in Path("streams.py").read_text()
    run = run_python("train.py", timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]  # as plain python (a world of one): no sampler to refuse


@pytest.mark.parametrize(
    "dataset",
    [
        'load_dataset("c4", split="train", streaming=True)',
        "ChainDataset([first, second])",
        'wds.WebDataset("shards-{000..009}.tar")',
        # a trial's: the stream's own methods hand back a stream (a sampler was added: TypeError at the start)
        'wds.WebDataset("shards-{000..009}.tar").shuffle(100).decode()',
        'load_dataset("c4", split="train", streaming=True).with_format("torch")',
        "stream.map(tokenize)",
        # a trial's: a sampler was added to these, and both crashed at the start (no len())
        'StreamingDataset(remote="s3://bucket/mds", batch_size=8)',
        'Dataset.from_dict({"x": [1, 2]}).to_iterable_dataset().map(tokenize)',
    ],
)
def test_library_streams_get_no_sampler(dataset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream from a library (a streaming Hugging Face dataset, torch's ChainDataset, a WebDataset) is
    iterable-style too: no sampler, a review item."""
    monkeypatch.chdir(tmp_path)
    source = (
        "import webdataset as wds\nfrom datasets import Dataset, load_dataset\nfrom streaming import StreamingDataset\n"
        "from torch.utils.data import ChainDataset, DataLoader\n\n"
        'stream = load_dataset("c4", split="train", streaming=True)\n'
        f"loader = DataLoader({dataset}, batch_size=8)\nfor batch in loader:\n    model(batch).backward()\n"
    )
    Path("train.py").write_text(source)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP005", "train.py"], catch_exceptions=False)
    assert "DDP005 training DataLoader over an IterableDataset" in result.output


SHARDED_STREAM = '''
import itertools
import os

import torch
from torch.utils.data import DataLoader, IterableDataset

RANK = int(os.environ.get("RANK", 0))
WORLD = int(os.environ.get("WORLD_SIZE", 1))


class Stream(IterableDataset):
    def __init__(self, rank=0, world=1):
        self.rank, self.world = rank, world

    def __iter__(self):
{body}


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Stream({args}), batch_size=8):
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
'''

CUT_BY_RANK = {
    "range from the environment": ("""        rank = int(os.environ.get("RANK", 0))
        for i in range(rank, 64, int(os.environ.get("WORLD_SIZE", 1))):
            yield torch.full((4,), float(i)), torch.ones(1)""", ""),
    "skip test on attributes set by the constructor": ("""        for i in range(64):
            if i % self.world != self.rank:
                continue
            yield torch.full((4,), float(i)), torch.ones(1)""", "RANK, WORLD"),
    "islice of a generator": ("""        samples = ((torch.full((4,), float(i)), torch.ones(1)) for i in range(64))
        yield from itertools.islice(samples, RANK, None, WORLD)""", ""),
}

NOT_CUT = {
    "rank-guarded log": ("""        if self.rank == 0:
            print("streaming")
        for i in range(64):
            yield torch.full((4,), float(i)), torch.ones(1)""", "RANK, WORLD"),
    "rank only printed": ("""        print("streaming on", RANK)
        for i in range(64):
            yield torch.full((4,), float(i)), torch.ones(1)""", ""),
    "split between loader workers only": ("""        info = torch.utils.data.get_worker_info()
        start = 0 if info is None else info.id
        for i in range(start, 64, 1 if info is None else info.num_workers):
            yield torch.full((4,), float(i)), torch.ones(1)""", ""),
}


@pytest.mark.parametrize("shape", sorted(CUT_BY_RANK))
def test_a_stream_that_already_cuts_by_rank_is_left_as_it_is_without_a_todo(shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body, args = CUT_BY_RANK[shape]
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(SHARDED_STREAM.format(body=body, args=args))
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    migrated = Path("train.py").read_text()
    assert "TODO(ddp-migrate)" not in migrated and "DistributedSampler" not in migrated
    assert "0 item(s) need a human" in result.output
    assert "its IterableDataset Stream cuts the stream by the rank" in result.output


@pytest.mark.parametrize("shape", sorted(NOT_CUT))
def test_a_stream_that_does_not_cut_by_rank_is_still_left_to_a_human(shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body, args = NOT_CUT[shape]
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(SHARDED_STREAM.format(body=body, args=args))
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    assert "DDP005 training DataLoader over an IterableDataset" in result.output
    assert "TODO(ddp-migrate): this IterableDataset streams the same samples" in Path("train.py").read_text()


BRANCHES = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset, WeightedRandomSampler


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(64):
            yield torch.randn(4), torch.randn(1)


def main(streaming=False, rounds=1):
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    if not streaming:
        loader = DataLoader(ds, batch_size=8, sampler=WeightedRandomSampler([1.0] * 64, 64))
    else:
        ds = Stream()
        loader = DataLoader(ds, batch_size=8)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("repeated", [False, True], ids=["one-pass", "in-a-loop"])
def test_a_stream_bound_in_another_branch_is_no_value_of_this_one(tmp_path: Path, repeated: bool) -> None:
    """A trial's ``ds = Stream()`` in the ``else`` of the ``if`` whose body builds a weighted loader from ``ds``:
    both loaders got the IterableDataset TODO (shard in __iter__, which a map-style set never calls). One run of
    ``main`` passes through one branch; where a loop repeats the ``if``, the other branch's binding may reach."""
    source = BRANCHES
    if repeated:
        body = source.split("    if not streaming:\n")[1].split("    model = nn.Linear")[0]
        source = source.replace(
            "    if not streaming:\n" + body,
            "    for _ in range(rounds):\n        if not streaming:\n" + "".join("    " + line for line in body.splitlines(True)),
        )
    (tmp_path / "train.py").write_text(source)
    report = CliRunner().invoke(cli, ["--diff", str(tmp_path / "train.py")], catch_exceptions=False).output
    reviews = [line for line in report.splitlines() if line.startswith("  review") and "DDP005" in line]
    assert len(reviews) == 2, report
    weighted, stream = reviews  # (in the order of their lines)
    assert "IterableDataset" in stream, report
    assert ("IterableDataset" in weighted) is repeated, report
