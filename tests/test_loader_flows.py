"""Loaders and batches the way real programs hand them around (shapes found by trying the tool on code it had
never seen):

- a training loop that iterates the loader through a generator of the program (``for x, y in
  metric_logger.log_every(loader, 10)``) trains on that loader: it is sharded and gets ``set_epoch``;
- a program that already divides its accumulation steps by the world size (nanoGPT's
  ``gradient_accumulation_steps //= ddp_world_size``) keeps its global batch itself: the batch size stays
  per process, and the sharded run computes the original's weights; a metric divided by the world size
  does not count;
- a program whose own ``init_process_group`` runs only when launched distributed still runs as plain
  ``python``: its new sampler takes the world size and rank from the runtime;
- one ``DataLoader(...)`` in a factory that several call sites use (training and evaluation) is not sharded
  blindly: it is left to a human with a TODO and a review line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_python, run_torchrun
from migrated import train_original_and_migrated

ENGINE = '''
class MetricLogger:
    def log_every(self, iterable, print_freq, header=""):
        for i, obj in enumerate(iterable):
            yield obj
            if i % print_freq == 0:
                print(header, i)


def log_every(iterable, print_freq):
    for i, obj in enumerate(iterable):
        yield obj


def train_one_epoch(model, opt, loader, epoch):
    for x, y in MetricLogger().log_every(loader, 10, f"Epoch {epoch}"):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def train_plain(model, opt, loader):
    for x, y in log_every(loader, 10):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
'''

WRAPPED_ENTRY = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

from engine import train_one_epoch, train_plain


def main():
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    other = DataLoader(ds, batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        train_one_epoch(model, opt, loader, epoch)
        train_plain(model, opt, other)


if __name__ == "__main__":
    main()
'''

NANOGPT_STYLE = '''
import os

import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

batch_size = 8
gradient_accumulation_steps = 4
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend="gloo")
    ddp_rank = int(os.environ["RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    master_process = ddp_rank == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process = True

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
train_loader = DataLoader(data, batch_size=batch_size, shuffle=False)
model = torch.nn.Linear(4, 1)
if ddp:
    model = DDP(model)
raw_model = model.module if ddp else model
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = iter(train_loader)
for it in range(4):
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        x, y = next(batches)
        loss = ((model(x) - y) ** 2).mean() / gradient_accumulation_steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
if master_process:
    torch.save(raw_model.state_dict(), "final.pt")
if ddp:
    destroy_process_group()
'''

SHARED_FACTORY = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


def create_loader(dataset, batch_size, is_training):
    loader_args = dict(batch_size=batch_size, shuffle=is_training)
    return DataLoader(dataset, **loader_args)


def main():
    train_loader = create_loader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), 8, is_training=True)
    eval_loader = create_loader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), 8, is_training=False)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
        with torch.no_grad():
            err = sum(((model(x) - y) ** 2).sum().item() for x, y in eval_loader)
        print(epoch, err)


if __name__ == "__main__":
    main()
'''


def migrate(folder: Path, entry: str = "train.py"):
    return CliRunner().invoke(cli, ["migrate", str(folder / entry)])


def test_a_loader_iterated_through_a_generator_of_the_program_is_sharded(tmp_path: Path) -> None:
    (tmp_path / "engine.py").write_text(ENGINE)
    (tmp_path / "train.py").write_text(WRAPPED_ENTRY)
    result = migrate(tmp_path)
    assert result.exit_code == 0, result.output
    train = (tmp_path / "train.py").read_text()
    assert train.count("sampler=DistributedSampler(ds, shuffle=True)") == 2, train
    assert "loader.sampler.set_epoch(epoch)" in train and "other.sampler.set_epoch(epoch)" in train
    assert "evaluation DataLoader left unsharded" not in result.output


def test_steps_divided_by_the_world_size_keep_the_batch_per_process(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(NANOGPT_STYLE)
    result = migrate(tmp_path)
    train = (tmp_path / "train.py").read_text()
    assert "per_process_batch_size" not in train, train
    assert "already divides gradient_accumulation_steps by the world size" in result.output
    # The sampler works without a process group too (the program makes one only under torchrun).
    assert "num_replicas=runtime.world_size(), rank=runtime.rank()" in train


def test_a_metric_divided_by_the_world_size_does_not_keep_the_batch(tmp_path: Path) -> None:
    source = NANOGPT_STYLE.replace("gradient_accumulation_steps //= ddp_world_size", "scale = 1.0 / ddp_world_size")
    (tmp_path / "train.py").write_text(source)
    migrate(tmp_path)
    assert "runtime.per_process_batch_size(batch_size)" in (tmp_path / "train.py").read_text()


@pytest.mark.distributed
def test_the_nanogpt_style_program_trains_the_same_and_runs_as_plain_python(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    original, migrated, _ = train_original_and_migrated(tmp_path, NANOGPT_STYLE)
    expected = torch.load(original / "final.pt", weights_only=True)
    actual = torch.load(migrated / "final.pt", weights_only=True)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], atol=1e-6, rtol=0)
    plain = tmp_path / "plain"
    plain.mkdir()
    run_python(migrated / "train.py", cwd=plain, timeout=120)
    single = torch.load(plain / "final.pt", weights_only=True)
    for key in expected:
        torch.testing.assert_close(single[key], expected[key], atol=1e-6, rtol=0)


def test_a_loader_factory_used_by_several_call_sites_is_left_to_a_human(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SHARED_FACTORY)
    result = migrate(tmp_path)
    assert result.exit_code == 1, result.output
    train = (tmp_path / "train.py").read_text()
    assert "sampler=" not in train and "import DistributedSampler" not in train
    assert "TODO(ddp-migrate): several call sites build their loaders here" in train
    assert "review" in result.output and "DDP005" in result.output


def test_a_factory_whose_training_call_site_the_user_sharded_is_left_as_it_is(tmp_path: Path) -> None:
    """A trial did what the shared-factory TODO asks (``sampler=DistributedSampler(...)`` at the training call,
    forwarded through the factory's ``**kwargs``): the next run put the TODO back and lint kept reporting
    DDP005, so a pre-commit hook would fail until a noqa."""
    factory = SHARED_FACTORY.replace(
        "def create_loader(dataset, batch_size, is_training):\n    loader_args = dict(batch_size=batch_size, shuffle=is_training)\n",
        "def create_loader(dataset, batch_size, is_training, **kwargs):\n    loader_args = dict(batch_size=batch_size, shuffle=is_training)\n    loader_args.update(kwargs)\n",
    )
    (tmp_path / "train.py").write_text(factory)
    first = migrate(tmp_path)
    assert first.exit_code == 1 and "TODO(ddp-migrate): several call sites build their loaders here" in (tmp_path / "train.py").read_text()
    train = (tmp_path / "train.py").read_text()
    train = "\n".join(line for line in train.splitlines() if "TODO(ddp-migrate)" not in line) + "\n"
    train = train.replace("loader_args = dict(batch_size=batch_size, shuffle=is_training)", "loader_args = dict(batch_size=batch_size)")
    train = train.replace(
        "train_loader = create_loader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), 8, is_training=True)",
        "train_set = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n"
        "    train_loader = create_loader(train_set, 4, is_training=True, sampler=DistributedSampler(train_set))",
    )
    train = "from torch.utils.data.distributed import DistributedSampler\n" + train
    (tmp_path / "train.py").write_text(train)
    again = migrate(tmp_path)
    assert again.exit_code == 0 and "TODO" not in (tmp_path / "train.py").read_text(), again.output
    # (the user forgot set_epoch: the epoch loop of the loader they split gets it, the evaluation none)
    assert "        train_loader.sampler.set_epoch(epoch)\n" in (tmp_path / "train.py").read_text(), again.output
    assert "eval_loader.sampler" not in (tmp_path / "train.py").read_text()
    assert "0 item(s) need a human" in again.output, again.output
    linted = CliRunner().invoke(cli, ["lint", "--select", "DDP005", str(tmp_path / "train.py")])
    assert linted.exit_code == 0 and "DDP005" not in linted.output, linted.output


@pytest.mark.parametrize(
    ("training", "evaluation"),
    [
        ("create_loader(train_set, 4, is_training=True)", "create_loader(eval_set, 8, is_training=False, sampler=DistributedSampler(eval_set))"),
        (
            "create_loader(train_set, 4, is_training=True, sampler=DistributedSampler(train_set) if len(sys.argv) > 1 else None)",
            "create_loader(eval_set, 8, is_training=False)",
        ),
    ],
    ids=["sampler-at-the-evaluation-call", "sampler-on-one-path-only"],
)
def test_a_factory_whose_training_call_site_is_not_always_sharded_keeps_its_review(tmp_path: Path, training: str, evaluation: str) -> None:
    """A review's crashes: a sampler at the evaluation call (or on one path of the training call) made the
    factory count as sharded; the training loader got ``train_loader.sampler.set_epoch`` on a RandomSampler."""
    source = SHARED_FACTORY.replace(
        "def create_loader(dataset, batch_size, is_training):\n    loader_args = dict(batch_size=batch_size, shuffle=is_training)\n",
        "def create_loader(dataset, batch_size, is_training, **kwargs):\n    loader_args = dict(batch_size=batch_size, shuffle=is_training)\n    loader_args.update(kwargs)\n",
    )
    source = source.replace(
        "    train_loader = create_loader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), 8, is_training=True)\n"
        "    eval_loader = create_loader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), 8, is_training=False)\n",
        "    train_set = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n    eval_set = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))\n"
        f"    train_loader = {training}\n    eval_loader = {evaluation}\n",
    )
    (tmp_path / "train.py").write_text("import sys\n\nfrom torch.utils.data.distributed import DistributedSampler\n" + source)
    result = migrate(tmp_path)
    migrated = (tmp_path / "train.py").read_text()
    assert "TODO(ddp-migrate): several call sites build their loaders here" in migrated, result.output
    assert ".set_epoch(" not in migrated, migrated


STEP_ENGINE = '''
import sys

import torch.nn.functional as F


class StepTrainer:
    def __init__(self, model, opt, loader):
        self.model, self.opt, self.loader = model, opt, loader
        self.it = iter(loader)
        self.seen = []

    def next_batch(self):
        try:
            return next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            return next(self.it)

    def run(self, steps):
        for _ in range(steps):
            x, y, index = self.next_batch()
            self.seen += index.tolist()
            loss = F.cross_entropy(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        sys.stderr.write(f"drew {len(self.seen)} distinct {len(set(self.seen))}\\\\n")
'''

STEP_ENTRY = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from engine import StepTrainer

if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long(), torch.arange(64)), batch_size=16)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    StepTrainer(model, opt, loader).run(8)
    torch.save(model.state_dict(), "final.pt")
'''


@pytest.mark.distributed
def test_batches_drawn_by_a_method_of_another_module_train_sharded(tmp_path: Path) -> None:
    """``next(self.it)`` in a helper method that the training loop calls: the loader trains (it was left
    whole, every rank drawing every sample, with nothing in the report)."""
    torch = pytest.importorskip("torch")
    (tmp_path / "engine.py").write_text(STEP_ENGINE)
    (tmp_path / "train.py").write_text(STEP_ENTRY)
    result = migrate(tmp_path)
    assert result.exit_code == 0, result.output
    assert "sampler=DistributedSampler(" in (tmp_path / "train.py").read_text()
    assert "self.loader.sampler.set_epoch(" in (tmp_path / "engine.py").read_text()
    original = tmp_path / "original"
    original.mkdir()
    (original / "engine.py").write_text(STEP_ENGINE)
    (original / "train.py").write_text(STEP_ENTRY)
    run_python(original / "train.py", cwd=original, timeout=120)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.output.count("drew 64 distinct 32") == 2, launch.output  # 8 steps of 8, 2 passes of a half
    expected = torch.load(original / "final.pt", weights_only=True)
    actual = torch.load(tmp_path / "final.pt", weights_only=True)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], atol=1e-6, rtol=0)


ZIPPED = '''
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    labeled = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)), torch.arange(32)), batch_size=8)
    unlabeled = DataLoader(TensorDataset(torch.randn(64, 4), torch.arange(64)), batch_size=16)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        seen = set()
        for (x, y, _), (u, index) in zip(labeled, unlabeled):
            seen.update(index.tolist())
            loss = nn.functional.cross_entropy(model(x), y) + 0.1 * model(u).softmax(1).max(1).values.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        sys.stderr.write(f"unlabeled {len(seen)} from {min(seen)}\\\\n")
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''


@pytest.mark.distributed
def test_every_loader_zipped_into_a_training_loop_is_sharded(tmp_path: Path) -> None:
    """``zip(labeled, unlabeled)``: only the first loader was sharded, every rank drawing the whole
    unlabeled set (and the ratio of labeled to unlabeled samples per step changed)."""
    torch = pytest.importorskip("torch")
    original, migrated, launch = train_original_and_migrated(tmp_path, ZIPPED)
    source = (migrated / "train.py").read_text()
    assert source.count("sampler=DistributedSampler(") == 2, source
    assert "labeled.sampler.set_epoch(epoch)" in source and "unlabeled.sampler.set_epoch(epoch)" in source
    assert launch.output.count("unlabeled 32 from 0") == 2 and launch.output.count("unlabeled 32 from 1") == 2, launch.output
    expected = torch.load(original / "final.pt", weights_only=True)
    actual = torch.load(migrated / "final.pt", weights_only=True)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "held",
    [
        "batches = zip(labeled, unlabeled)",
        "batches = zip(labeled, itertools.cycle(unlabeled))",
        "batches = zip(labeled, unlabeled)\n        batches = enumerate(batches)",  # (a review's rebinding)
    ],
    ids=["zip", "zip-cycle", "zip-rebound"],
)
def test_loaders_zipped_into_a_variable_the_loop_iterates_are_all_sharded(tmp_path: Path, held: str) -> None:
    """A trial's silent wrong: ``batches = zip(la, itertools.cycle(lb))`` then ``for ... in batches:`` sharded
    ``la`` only; ``lb`` kept its shuffle and whole batch, every rank drew all of it, and nothing was reported."""
    source = ZIPPED.replace("        for (x, y, _), (u, index) in zip(labeled, unlabeled):\n", f"        {held}\n        for (x, y, _), (u, index) in batches:\n")
    (tmp_path / "train.py").write_text("import itertools\n" + source)
    result = migrate(tmp_path)
    migrated = (tmp_path / "train.py").read_text()
    assert migrated.count("sampler=DistributedSampler(") == 2, result.output + migrated
    assert "labeled.sampler.set_epoch(epoch)" in migrated and "unlabeled.sampler.set_epoch(epoch)" in migrated, migrated
    # (each loader's data set gets a name of its own: the trial's copy named both train_dataset)
    assert migrated.count("    train_dataset = TensorDataset(") == 1 and migrated.count("    train_set = TensorDataset(") == 1, migrated


SPAWNED = '''
import argparse

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def main_worker(gpu, args):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:23456", rank=gpu, world_size=args.ngpus)
    model = DDP(nn.Linear(4, 1))
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=args.batch_size // args.ngpus)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--ngpus", type=int, default=1)
    args = parser.parse_args()
    mp.spawn(main_worker, nprocs=args.ngpus, args=(args,))
'''


def test_a_batch_the_spawned_worker_divides_by_its_process_count_is_not_divided_again(tmp_path: Path) -> None:
    """``batch_size=args.batch_size // args.ngpus`` in an ``mp.spawn`` worker: the program keeps its global
    batch itself (the migration had halved the global batch), dividing by the processes torchrun starts on the
    node (``args.ngpus``, the launch's count, would be the flag's value whatever torchrun started)."""
    (tmp_path / "train.py").write_text(SPAWNED)
    result = migrate(tmp_path)
    train = (tmp_path / "train.py").read_text()
    assert result.exit_code == 0, result.output
    assert "batch_size=args.batch_size // runtime.local_world_size()" in train and "per_process_batch_size" not in train, train
    assert "the program already divides args.batch_size by the world size" in result.output


SCALED_LR = '''
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def get_world_size():
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size()


def main():
    batch_size, base_lr = 16, 0.05
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=batch_size)
    model = nn.Linear(4, 1)
    lr = base_lr * batch_size * get_world_size() / 16  # the linear scaling rule: per-process batches
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


def test_a_program_that_scales_by_its_total_batch_keeps_the_batch_per_process(tmp_path: Path) -> None:
    """``lr = base_lr * batch_size * get_world_size() / 16`` (MAE, DeiT): the program's batch size is per
    process by design. Made global, the learning rate doubled for the same total batch (a trial)."""
    (tmp_path / "train.py").write_text(SCALED_LR)
    result = migrate(tmp_path)
    train = (tmp_path / "train.py").read_text()
    assert result.exit_code == 0, result.output
    assert "batch_size=batch_size" in train and "per_process_batch_size" not in train, train
    assert "the program already multiplies batch_size by the world size" in result.output


def test_a_product_without_the_world_size_makes_the_batch_global(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCALED_LR.replace("* get_world_size() ", "* 2 "))
    migrate(tmp_path)
    assert "runtime.per_process_batch_size(batch_size)" in (tmp_path / "train.py").read_text()


COMPREHENSION_STEPS = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train_step(model, optimizer, batch):
    x, y = batch
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def train_epoch(model, optimizer, loader):
    return sum(train_step(model, optimizer, batch) for batch in loader) / len(loader)


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        print(train_epoch(model, optimizer, loader))


if __name__ == "__main__":
    main()
'''


def test_a_loader_a_comprehension_trains_on_is_sharded(tmp_path: Path) -> None:
    """``sum(train_step(...) for batch in loader)``: the loader trains (it was left whole, every rank drawing
    the whole set, with nothing reported)."""
    (tmp_path / "train.py").write_text(COMPREHENSION_STEPS)
    result = migrate(tmp_path)
    migrated = (tmp_path / "train.py").read_text()
    assert "sampler=DistributedSampler(" in migrated
    # A trial: its epoch loop was not found (no set_epoch, a review) and its batches were said to come from no
    # DataLoader (DDP040).
    assert "    for epoch in range(2):\n        loader.sampler.set_epoch(epoch)\n" in migrated, migrated
    assert "DDP040" not in result.output and "DDP006 line" in result.output and result.exit_code == 0, result.output


CYCLED = '''
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def cycle(loader):
    while True:
        for batch in loader:
            yield batch


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1), torch.arange(64)), batch_size=16)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = cycle(loader)
    seen = set()
    for step in range(8):
        x, y, index = next(batches)
        seen.update(index.tolist())
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    sys.stderr.write(f"distinct {len(seen)}\\\\n")
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''


@pytest.mark.distributed
def test_batches_drawn_from_a_cycling_generator_train_sharded(tmp_path: Path) -> None:
    """``next(cycle(loader))`` with ``def cycle(loader): while True: for b in loader: yield b``: the loader
    trains (it was left whole, with a review that said the batches came from no DataLoader)."""
    torch = pytest.importorskip("torch")
    original, migrated, launch = train_original_and_migrated(tmp_path, CYCLED)
    assert "sampler=DistributedSampler(" in (migrated / "train.py").read_text()
    assert launch.output.count("distinct 32") == 2, launch.output
    expected = torch.load(original / "final.pt", weights_only=True)
    actual = torch.load(migrated / "final.pt", weights_only=True)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], atol=1e-6, rtol=0)
