"""Training loaders spelled in ways the first migrations did not read.

A trial's data pipelines:

* ``for name, loader in (("a", a), ("b", b)):`` (or ``for loader in (a, b):``) trained through a variable
  that takes one loader after another; the loaders were left whole, and with another training loader in the
  program the report said nothing (every rank trained on all of them);
* ``DataLoader(ds, batch_size=None, shuffle=True)`` (no automatic batching) became
  ``per_process_batch_size(None)``: TypeError, in plain python too. Each item of such a loader is a whole
  batch: sharded, every step would average N of them, so it is left to a human;
* ``sampler=None`` spelled out (by keyword, or positionally as in ``DataLoader(ds, 8, True, None, None, 0,
  ...)``) was read as a sampler: the loader was left to a human "with its own sampler", and DDP036's safe fix
  removed ``shuffle=True`` from a loader that has none (it stopped shuffling).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_python, run_torchrun
from migrated import migrate_script

PROGRAM = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    first = TensorDataset(torch.randn(32, 4), torch.arange(32))
    second = TensorDataset(torch.randn(32, 4), torch.arange(100, 132))
    third = TensorDataset(torch.randn(16, 4), torch.arange(200, 216))
    a = DataLoader(first, 8, True, None, None, 0, None, False, True)
    b = DataLoader(second, batch_size=8, shuffle=True, sampler=None)
    single = DataLoader(third, batch_size=None, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = {}
    for epoch in range(2):
        for name, loader in (("a", a), ("b", b)):
            for x, index in loader:
                seen.setdefault(name, []).extend(index.tolist())
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
        for x, index in single:
            seen.setdefault("single", []).append(int(index))
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    for name in sorted(seen):
        print(f"{name}: {len(seen[name])} seen, {len(set(seen[name]))} distinct", flush=True)


if __name__ == "__main__":
    main()
'''


def test_loaders_taken_in_turn_and_spelled_defaults_are_sharded(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM)
    assert code == 1, report
    assert report.count("DistributedSampler added to the training DataLoader") == 2, report
    # the spelled-out ``None`` samplers give way to the DistributedSampler; later positionals become keywords
    assert "runtime.per_process_batch_size(8),\n        sampler=DistributedSampler(first, shuffle=True),\n        num_workers=0," in migrated
    assert "None, None" not in migrated and "sampler=None" not in migrated
    # set_epoch for each loader, in the epoch loop (not in the loop over the loaders, by their names there)
    lines = migrated.splitlines()
    epoch = lines.index("    for epoch in range(2):")
    assert lines[epoch + 1 : epoch + 3] == ["        a.sampler.set_epoch(epoch)", "        b.sampler.set_epoch(epoch)"], migrated
    # the loader of whole batches is left as it is, to a human
    assert "    single = DataLoader(third, batch_size=None, shuffle=True)" in migrated
    assert "1 item(s) need a human" in report and "without automatic batching (batch_size=None)" in report


def test_loop_over_a_tuple_of_loaders_alone(tmp_path: Path) -> None:
    source = PROGRAM.replace('for name, loader in (("a", a), ("b", b)):', "for loader in (a, b):").replace(
        "seen.setdefault(name, [])", "seen.setdefault(loader is a and 'a' or 'b', [])"
    )
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 1, report
    assert report.count("DistributedSampler added to the training DataLoader") == 2, report
    assert "        a.sampler.set_epoch(epoch)\n        b.sampler.set_epoch(epoch)\n" in migrated


def test_a_spelled_out_none_sampler_is_no_sampler_for_ddp036(tmp_path: Path) -> None:
    """``lint --fix`` keeps ``shuffle=True`` where the sampler is ``None``: there is nothing to conflict with."""
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    script = tmp_path / "train.py"
    script.write_text("from torch.utils.data import DataLoader\nloader = DataLoader(ds, 5, shuffle=True, sampler=None)\n")
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP036", "--fix", str(script)])
    assert result.exit_code == 0, result.output
    assert "shuffle=True" in script.read_text()


@pytest.mark.distributed
def test_every_loader_is_shared_out_between_the_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    migrate_script(tmp_path, PROGRAM)
    plain = run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120)
    for line in ("a: 64 seen, 32 distinct", "b: 64 seen, 32 distinct", "single: 32 seen, 16 distinct"):
        assert line in plain.output, plain.output
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    # rank 0 prints: its half of the sharded loaders, each epoch; the loader of whole batches is whole
    for line in ("a: 32 seen, ", "b: 32 seen, ", "single: 32 seen, "):
        assert line in launch.output, launch.output


WRAPPED = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class DeviceDataLoader:
    """Move each batch to the device (the fastai / Jovian course shape)."""

    def __init__(self, dl, device):
        self.dl = dl
        self.device = device

    def __iter__(self):
        for batch in self.dl:
            yield [t.to(self.device) for t in batch]

    def __len__(self):
        return len(self.dl)


def fit(epochs, model, train_dl, opt):
    orders = []
    for epoch in range(epochs):
        order = []
        for index, x in train_dl:
            order.extend(index.tolist())
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        orders.append(order)
    print(f"{len(orders[0])} per epoch, reshuffled: {orders[0] != orders[1]}", flush=True)


def main():
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_dl = DataLoader(TensorDataset(torch.arange(32), torch.randn(32, 4)), batch_size=8, shuffle=True)
    train_dl = DeviceDataLoader(train_dl, device)
    model = nn.Linear(4, 1).to(device)
    fit(2, model, train_dl, torch.optim.SGD(model.parameters(), lr=0.1))


if __name__ == "__main__":
    main()
'''


@pytest.mark.distributed
def test_a_loader_rebound_to_its_device_wrapper_gets_its_epoch_through_the_runtime(tmp_path: Path) -> None:
    """``train_dl.sampler.set_epoch(epoch)`` on the wrapper raised AttributeError, in plain python too."""
    pytest.importorskip("torch")
    migrated, report, code = migrate_script(tmp_path, WRAPPED)
    assert code == 0, report
    assert "        runtime.set_epoch(train_dl, epoch)\n" in migrated and ".sampler.set_epoch" not in migrated
    plain = run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120)
    assert "32 per epoch, reshuffled: True" in plain.output, plain.output
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "16 per epoch, reshuffled: True" in launch.output, launch.output


STAGES = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.arange(16)), batch_size=4, shuffle=True)
    model = torch.nn.Linear(1, 1)
    orders = []
    for stage, lr in enumerate([0.1, 0.01]):
        for epoch in range(2):
            order = []
            for (index,) in loader:
                order.extend(index.tolist())
                model(index.float()[:, None]).sum().backward()
            orders.append(tuple(order))
    print(f"distinct orders: {len(set(orders))}", flush=True)


if __name__ == "__main__":
    main()
'''


def test_an_epoch_loop_inside_a_loop_of_stages_counts_its_epochs_on(tmp_path: Path) -> None:
    """``set_epoch(epoch)`` in the inner loop made the second stage replay the first one's orders (2
    distinct orders of 4): the sampler now counts its epochs itself."""
    migrated, report, code = migrate_script(tmp_path, STAGES)
    assert code == 0, report
    assert "        for epoch in range(2):\n            loader.sampler.set_epoch(loader.sampler.epoch + 1)\n" in migrated
    assert "distinct orders: 4" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


def test_a_loop_that_trains_on_one_loader_and_evaluates_on_the_other_shards_neither(tmp_path: Path) -> None:
    """``for phase, loader in (("train", a), ("val", b)):`` with ``if phase == "train": step``: which loader
    trains is decided inside the loop, so neither is taken for a training loader (the validation loader was
    sharded and its loss reported on rank 0's half); the loop is left to a human."""
    source = PROGRAM.replace(
        "                opt.zero_grad()\n                model(x).pow(2).mean().backward()\n                opt.step()\n",
        '                if name == "a":\n                    opt.zero_grad()\n                    model(x).pow(2).mean().backward()\n                    opt.step()\n',
        1,
    )
    assert source != PROGRAM
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DataLoader(first, 8, True, None, None, 0, None, False, True)" in migrated
    assert "DataLoader(second, batch_size=8, shuffle=True, sampler=None)" in migrated
    assert "DDP040 training batches here come from no DataLoader" in report, report


def test_a_dropped_last_sampler_none_keeps_the_call_s_layout(tmp_path: Path) -> None:
    source = PROGRAM.replace(
        "b = DataLoader(second, batch_size=8, shuffle=True, sampler=None)",
        "b = DataLoader(\n        second,\n        batch_size=8,\n        sampler=None,\n    )",
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert (
        "    b = DataLoader(\n        second,\n        batch_size=runtime.per_process_batch_size(8),\n"
        "        sampler=DistributedSampler(second, shuffle=False),\n    )\n"
    ) in migrated, migrated


CHOSEN_SAMPLER = '''
import os

import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    local_rank = int(os.environ.get("LOCAL_RANK", -1))
    ds = TensorDataset(torch.arange(16).float()[:, None])
    sampler = RandomSampler(ds) if local_rank == -1 else DistributedSampler(ds)
    loader = DataLoader(ds, sampler=sampler, batch_size=4)
    model = torch.nn.Linear(1, 1)
    for epoch in range(2):
        for (x,) in loader:
            model(x).sum().backward()
    print("done", flush=True)


if __name__ == "__main__":
    main()
'''


def test_a_sampler_chosen_by_the_launch_gets_its_epoch_through_the_runtime(tmp_path: Path) -> None:
    """The legacy Hugging Face choice ``RandomSampler(ds) if local_rank == -1 else DistributedSampler(ds)``:
    ``loader.sampler.set_epoch(epoch)`` raised AttributeError on a ``RandomSampler`` (plain python)."""
    migrated, report, _ = migrate_script(tmp_path, CHOSEN_SAMPLER)
    assert "        runtime.set_epoch(loader, epoch)\n" in migrated, migrated
    assert "done" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output



def test_a_sampler_that_may_be_none_gets_its_epoch_through_the_runtime(tmp_path: Path) -> None:
    """The ImageNet example's ``DistributedSampler(ds) if distributed else None``: the loader makes its own
    sampler where it is ``None``, which has no ``set_epoch`` (plain python raised AttributeError)."""
    source = CHOSEN_SAMPLER.replace("RandomSampler(ds) if local_rank == -1 else DistributedSampler(ds)", "DistributedSampler(ds) if local_rank != -1 else None")
    migrated, _, _ = migrate_script(tmp_path, source)
    assert "        runtime.set_epoch(loader, epoch)\n" in migrated, migrated
    assert "done" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


def test_an_epoch_counted_in_an_attribute_gets_set_epoch(tmp_path: Path) -> None:
    """``for self.epoch in range(epochs):`` (a trial's Trainer): it was reviewed as an epoch loop that never
    calls set_epoch, with no fix."""
    source = """
import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, loader):
        self.model, self.loader, self.epoch = model, loader, 0
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def fit(self, epochs):
        for self.epoch in range(epochs):
            for (x,) in self.loader:
                self.opt.zero_grad()
                self.model(x).mean().backward()  # (a .sum() over the batch is reviewed: DDP039)
                self.opt.step()


def main():
    model = torch.nn.Linear(2, 1)
    Trainer(model, DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4, shuffle=True)).fit(2)


if __name__ == "__main__":
    main()
"""
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "        for self.epoch in range(epochs):\n            self.loader.sampler.set_epoch(self.epoch)\n" in migrated, migrated


def test_two_entries_sharing_a_training_loop_get_one_set_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial: pretrain.py and finetune.py each hand their loader to Engine.run; the epoch loop got
    # ``loader.sampler.set_epoch(epoch)`` twice, and the report two identical lines.
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    monkeypatch.chdir(tmp_path)
    Path("pkg").mkdir()
    Path("pkg/__init__.py").write_text("")
    Path("pkg/engine.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Engine:\n    def __init__(self, model):\n"
        "        self.model = model\n        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)\n\n"
        "    def run(self, loader, epochs):\n        for epoch in range(epochs):\n            for x, y in loader:\n"
        "                self.opt.zero_grad()\n                nn.functional.cross_entropy(self.model(x), y).backward()\n"
        "                self.opt.step()\n"
    )
    for name, size in (("pretrain.py", 32), ("finetune.py", 16)):
        Path(name).write_text(
            "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n"
            "from pkg.engine import Engine\n\n\ndef main():\n"
            f"    loader = DataLoader(TensorDataset(torch.randn({size}, 8), torch.randint(0, 2, ({size},))), batch_size=8, shuffle=True)\n"
            "    Engine(nn.Linear(8, 2)).run(loader, 2)\n\n\nif __name__ == '__main__':\n    main()\n"
        )
    result = CliRunner().invoke(cli, ["."], catch_exceptions=False)
    assert Path("pkg/engine.py").read_text().count("loader.sampler.set_epoch(epoch)") == 1, result.output
    assert result.output.count("DDP006 line") == 1, result.output


def test_a_batch_sampler_is_named_as_such_in_the_review(tmp_path: Path) -> None:
    """A trial's bucketing ``batch_sampler=`` was reviewed as "its own sampler"."""
    source = """
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset


def main():
    ds = TensorDataset(torch.randn(16, 2))
    loader = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 4, False))
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for (x,) in loader:
            opt.zero_grad()
            model(x).mean().backward()
            opt.step()


if __name__ == "__main__":
    main()
"""
    _, report, _ = migrate_script(tmp_path, source)
    assert "training DataLoader with its own batch sampler is not sharded" in report, report


ONE_PASS = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 1)), batch_size=4, SHUFFLE)
    for (x,) in loader:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


if __name__ == "__main__":
    main()
'''


def test_one_pass_over_a_loader_in_its_order_needs_no_epoch(tmp_path: Path) -> None:
    """``DistributedSampler(ds, shuffle=False)`` gives the same order whatever epoch it is told: no review of a
    missing ``set_epoch`` (a trial's needless TODO). Nor does a shuffling one that the program goes over once
    (a trial's needless review); a program that resumes from a checkpoint may run once per epoch, so its pass
    is still reviewed."""
    migrated, report, code = migrate_script(tmp_path, ONE_PASS.replace("SHUFFLE", "shuffle=False"))
    assert "DistributedSampler(" in migrated and "shuffle=False" in migrated, migrated
    assert "DDP006" not in report and code == 0, report
    (tmp_path / "shuffled").mkdir()
    migrated, report, code = migrate_script(tmp_path / "shuffled", ONE_PASS.replace("SHUFFLE", "shuffle=True"))
    assert "DistributedSampler(" in migrated and "DDP006" not in report and code == 0, report
    (tmp_path / "resumed").mkdir()
    resumed = ONE_PASS.replace("SHUFFLE", "shuffle=True").replace(
        "    for (x,) in loader:", '    model.load_state_dict(torch.load("last.pt"))\n    for (x,) in loader:'
    )
    _, report, _ = migrate_script(tmp_path / "resumed", resumed)
    assert "DDP006" in report, report


SWEEP = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8, shuffle=True)
    for OUTER:
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for (x,) in loader:
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    print("swept", flush=True)


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("outer", ["lr in (0.1, 0.01)", 'name, width in {"a": 1, "b": 2}.items()'], ids=["floats", "dict_items"])
def test_a_loop_over_settings_gives_the_sampler_no_epoch_number(tmp_path: Path, outer: str) -> None:
    """A trial's crash: ``for lr in (0.1, 0.01):`` around the pass was taken for the epoch loop and got
    ``loader.sampler.set_epoch(lr)`` ("manual_seed expected a long, but got float"), reported as done. Each
    setting's pass is a new pass over the loader (a new order, as the original's shuffle gave it): the runtime
    counts the passes."""
    migrated, report, code = migrate_script(tmp_path, SWEEP.replace("OUTER", outer))
    assert "set_epoch(lr)" not in migrated and "set_epoch(name)" not in migrated, migrated
    assert "runtime.next_epoch(loader)\n" in migrated and code == 0, report
    assert "swept" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
