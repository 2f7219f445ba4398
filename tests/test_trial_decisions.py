"""Two answers a trial of reference-style and language-model trainers proved wrong, each on a small program
through the real command line.

- DDP041 took the index of ``enumerate(logger.log_every(loader))`` for a per-rank value once the logger
  object held a loss (``logger.update(loss=...)``): ``(step + 1) % accum == 0``, the same on every rank at
  the same pass, was reported as a decision on this rank's shard (torchvision's ``MetricLogger`` shape).
- DDP040 took any draw from torch's state as the training data once a seed came from the rank: batches
  drawn with their own generator seeded alike (``generator=gen``) were the same on every rank, and an
  unrelated ``torch.randn`` silenced the review. The draws that count are those whose values reach a loss.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from migrated import lint_findings

lint = lint_findings


LOGGED_STEPS = """import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


class MetricLogger:
    def __init__(self):
        self.meters = {}

    def update(self, **kwargs):
        for k, v in kwargs.items():
            self.meters[k] = v

    def log_every(self, iterable, every):
        for i, obj in enumerate(iterable):
            yield obj


def train_one_epoch(model, opt, loader, accum):
    logger = MetricLogger()
    for step, (x, y) in enumerate(logger.log_every(loader, 10)):
        loss = ((model(x) - y) ** 2).mean() / accum
        loss.backward()
        if (step + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
        logger.update(loss=loss.item())
    return logger.meters["loss"]


dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
for epoch in range(10):
    loader.sampler.set_epoch(epoch)
    last = train_one_epoch(model, opt, loader, 2)
    if last < 0.01:
        break
"""


def test_the_index_of_an_enumerated_pass_is_the_same_on_every_rank(tmp_path: Path) -> None:
    found = lint(tmp_path, LOGGED_STEPS, "DDP041")
    assert not any("(step + 1) % accum == 0" in line for line in found), found
    # The logger's loss is this rank's own: the early stop on it is still reported.
    assert len(found) == 1 and "`last < 0.01` decides on last" in found[0], found


DRAWN_BATCHES = """import torch
import torch.nn as nn
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

runtime.setup(device="cpu")
torch.manual_seed(0 + runtime.rank())
data = torch.load("data.pt")
{extra}gen = torch.Generator().manual_seed(0)
model = DistributedDataParallel(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    ix = torch.randint(len(data), (4,){generator})
    loss = model(data[ix]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
runtime.cleanup()
"""


def test_batches_drawn_with_a_generator_seeded_alike_stay_the_same_on_every_rank(tmp_path: Path) -> None:
    """The rank seeds torch's own state, but the batches come from ``gen``, seeded alike: DDP040 stays,
    whether or not some other draw (``noise``, which feeds no loss) uses torch's state."""
    for extra in ("", "noise = torch.randn(4)\n"):
        found = lint(tmp_path, DRAWN_BATCHES.format(extra=extra, generator=", generator=gen"), "DDP040")
        assert len(found) == 1 and "no DataLoader" in found[0], (extra, found)


def test_batches_drawn_from_the_state_the_rank_seeds_are_each_ranks_own(tmp_path: Path) -> None:
    assert lint(tmp_path, DRAWN_BATCHES.format(extra="", generator=""), "DDP040") == []
    # The data themselves drawn from it (a synthetic set): each rank trains on its own.
    source = DRAWN_BATCHES.format(extra="", generator=", generator=gen").replace('torch.load("data.pt")', "torch.randn(1000, 4)")
    assert lint(tmp_path, source, "DDP040") == []


WRAPPER_SAVED_ON_RANK_0 = """import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
model = DistributedDataParallel(nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(64, 4)
for i in range(dist.get_rank() * 8, 64, 8 * dist.get_world_size()):
    loss = model(data[i : i + 8]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
if dist.get_rank() == 0:
    torch.save(model, "m.pt")
    torch.save(model.module, "plain.pt")
dist.barrier()
dist.destroy_process_group()
"""


def test_a_ddp_wrapper_pickled_on_rank_0_is_saved_as_the_model_itself(tmp_path: Path) -> None:
    """``torch.save(model, path)`` of the wrapper, already on rank 0 only: the file loads only where a process
    group exists (a trial's checkpoint failed in plain ``torch.load``: "Default process group has not been
    initialized"). Reported, and fixed to ``runtime.unwrap(model)``; the save of ``model.module`` is fine."""
    found = lint(tmp_path, WRAPPER_SAVED_ON_RANK_0, "DDP007")
    assert len(found) == 1 and ":16:5: DDP007 torch.save pickles the DistributedDataParallel wrapper" in found[0], found
    result = CliRunner().invoke(cli, ["-q", str(tmp_path / "train.py")])
    fixed = (tmp_path / "train.py").read_text()
    assert result.exit_code == 0 and '    torch.save(runtime.unwrap(model), "m.pt")\n' in fixed, (result.output, fixed)
    assert '    torch.save(model.module, "plain.pt")\n' in fixed, fixed


BARRIER_AFTER_PATIENCE = """import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sampler = DistributedSampler(ds)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
best, bad = float("inf"), 0
for epoch in range(10):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    val = loss.item()
    if val < best:
        best = val
    else:
        bad += 1
        if bad >= 3:
            break
    dist.barrier()
"""


def test_a_collective_after_an_early_exit_names_the_branch_that_may_leave(tmp_path: Path) -> None:
    """The barrier is skipped only where the else branch's ``break`` runs, not wherever ``val < best`` is false
    (a trial's review line said "runs only where `val_loss < best_val - 1e-4` is true")."""
    found = lint(tmp_path, BARRIER_AFTER_PATIENCE, "DDP033")
    assert len(found) == 1, found
    assert (
        "dist.barrier() is a collective but runs only where the `if val < best:` before it does not leave early "
        "(its else branch may leave the loop or the function)"
    ) in found[0], found


PADDED_TOKENS = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    tokens = torch.randint(1, 10, (64, 6))
    tokens[::3, 4:] = 0  # padding
    loader = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=8, shuffle=True)
    model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 10))
    criterion = nn.CrossEntropyLoss(LOSS_ARGS)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = criterion(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
"""


def test_a_mean_over_the_targets_kept_is_noted_as_a_mean_per_process(tmp_path: Path) -> None:
    """``ignore_index=`` makes the loss a mean over each shard's own count of targets kept: the migrated run
    averages the processes' means (a trial measured weights off by 8% with padded tokens). A note says so, and
    how to get the exact mean; a plain mean gets none."""
    from migrated import migrate_script

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, report, code = migrate_script(tmp_path / "a", PADDED_TOKENS.replace("LOSS_ARGS", "ignore_index=0"))
    assert code == 0 and "0 item(s) need a human" in report, report
    assert "note DDP039 line" in report and "nn.CrossEntropyLoss(..., ignore_index=...) averages over the targets this process does not ignore" in report, report
    _, report, code = migrate_script(tmp_path / "b", PADDED_TOKENS.replace("LOSS_ARGS", ""))
    assert code == 0 and "DDP039" not in report, report


SAVE_THROUGH_AN_OPEN_FILE = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    best = None
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if best is None or loss.item() < best:
            best = loss.item()
            with open("model.pt", "wb") as f:
                torch.save(model.state_dict(), f)


if __name__ == "__main__":
    main()
"""


def test_a_save_into_a_file_opened_by_a_with_block_is_guarded_once(tmp_path: Path) -> None:
    """The ``with open(...)`` block goes under the rank-0 guard (every rank truncated the file) and the save
    inside it had its own guard too (DDP007): one guard is left (a trial's migration had both)."""
    from migrated import migrate_script

    migrated, report, _ = migrate_script(tmp_path, SAVE_THROUGH_AN_OPEN_FILE)  # (the decision on the loss: a review)
    assert "DDP012 line 19: file written on rank 0 only" in report, report
    assert migrated.count("is_main_process()") == 1, migrated
    assert (
        '            if runtime.is_main_process():\n                with open("model.pt", "wb") as f:\n'
        "                    torch.save(model.module.state_dict(), f)\n"
    ) in migrated, migrated


def test_a_collective_after_an_exit_that_always_leaves_names_the_test(tmp_path: Path) -> None:
    """``if val >= best: break`` before it: the barrier runs exactly where the test is false, as said."""
    source = BARRIER_AFTER_PATIENCE.replace(
        "    if val < best:\n        best = val\n    else:\n        bad += 1\n        if bad >= 3:\n            break\n",
        "    if val >= best:\n        break\n    best = val\n",
    )
    found = lint(tmp_path, source, "DDP033")
    assert len(found) == 1 and "dist.barrier() is a collective but runs only where `val >= best` is false" in found[0], found


CALLBACK_MODULE = """class EarlyStopping:
    def __init__(self, patience=1):
        self.patience, self.best, self.wait = patience, float("inf"), 0

    def on_epoch_end(self, trainer, logs):
        if logs["loss"] < self.best:
            self.best, self.wait = logs["loss"], 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                trainer.stop_training = True
"""

TRAINER_WITH_CALLBACKS = """import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from callbacks import EarlyStopping


class Trainer:
    def __init__(self, model, opt, callbacks=None):
        self.model, self.opt = model, opt
        self.callbacks = CALLBACKS
        self.stop_training = False

    def fit(self, loader, epochs):
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            total = 0.0
            for x, y in loader:
                loss = nn.functional.mse_loss(self.model(x), y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                total += loss.item()
            for cb in self.callbacks:
                cb.on_epoch_end(self, {"loss": total / len(loader)})
            if self.stop_training:
                break


dist.init_process_group("gloo")
ds = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
model = DDP(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
Trainer(model, opt, [EarlyStopping(patience=1)]).fit(DataLoader(ds, batch_size=32, sampler=DistributedSampler(ds)), 50)
"""


@pytest.mark.parametrize(
    "held", ["callbacks", "callbacks or []", "callbacks if callbacks is not None else []", "list(callbacks or [])"]
)
def test_a_stop_decided_in_a_callback_of_a_list_given_with_a_default_is_reported(tmp_path: Path, held: str) -> None:
    """``self.callbacks = callbacks or []`` hid the callbacks from the analysis: the early stop on each rank's own
    loss (in another module) went unreported, and a trial's migrated run crashed (gloo) where NCCL hangs."""
    (tmp_path / "callbacks.py").write_text(CALLBACK_MODULE)
    found = lint(tmp_path, TRAINER_WITH_CALLBACKS.replace("CALLBACKS", held), "DDP041")
    assert any("`self.stop_training` decides on self.stop_training" in line for line in found), found


def test_the_index_read_after_the_loop_counts_this_ranks_passes(tmp_path: Path) -> None:
    """After ``for n, v in enumerate(hard, 1):`` over this rank's own list, ``n`` is that list's length: a
    decision on it is per rank (a review's program hung once the index was taken as common everywhere)."""
    source = LOGGED_STEPS.replace(
        '    return logger.meters["loss"]\n',
        '    hard = [v for v in logger.meters.values() if v > 1.0]\n    n = 0\n    for n, v in enumerate(hard, 1):\n'
        '        print(n, v)\n    return n\n',
    )
    found = lint(tmp_path, source, "DDP041")
    assert any("`last < 0.01` decides on last" in line for line in found), found
    assert not any("(step + 1) % accum == 0" in line for line in found), found


def test_a_ddp_wrapper_the_program_loads_back_whole_is_its_own_format(tmp_path: Path) -> None:
    """``model = torch.load("m.pt")`` resumes the wrapper itself: saving the unwrapped model would hand the
    next run a plain module where it expects the wrapper (a review: ``'Linear' object has no attribute
    'module'``, or each rank training alone)."""
    source = WRAPPER_SAVED_ON_RANK_0.replace(
        "opt = torch.optim.SGD", 'import os\nif os.path.exists("m.pt"):\n    model = torch.load("m.pt", weights_only=False)\nopt = torch.optim.SGD'
    )
    assert lint(tmp_path, source, "DDP007") == []


def test_a_mean_over_the_targets_kept_is_noted_where_the_sampler_is_left_to_a_human(tmp_path: Path) -> None:
    """A loader with a weighted sampler of its own is left to a human (DDP005), who will shard it: each shard's
    mean over its own kept targets is still what DDP averages (a trial: the note went missing)."""
    from migrated import migrate_script

    weighted = PADDED_TOKENS.replace("LOSS_ARGS", "ignore_index=0").replace(
        "batch_size=8, shuffle=True)", "batch_size=8, sampler=WeightedRandomSampler([1.0] * 64, 64))"
    ).replace("DataLoader, TensorDataset", "DataLoader, TensorDataset, WeightedRandomSampler")
    _, report, _ = migrate_script(tmp_path, weighted)
    assert "review" in report and "DDP005" in report, report
    assert "note DDP039 line" in report and "ignore_index=...) averages over the targets this process does not ignore" in report, report
