"""What a review of this session's decision checks (DDP041, DDP049, DDP011, DDP007) proved wrong, each on a small
hand-written DDP program: hangs that went unreported, and false alarms on correct code."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

HEAD = """import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sampler = DistributedSampler(ds)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
"""

STEP = "        loss = ((model(x) - y) ** 2).mean()\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n"


def lint(tmp_path: Path, source: str, codes: str) -> list[str]:
    path = tmp_path / "train.py"
    path.write_text(HEAD + source)
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", codes, str(path)])
    assert result.exit_code in (0, 1), result.output
    return [line for line in result.output.splitlines() if line.strip()]


def test_a_helper_that_reduces_a_logged_count_but_returns_its_own_loss_is_no_reduction(tmp_path: Path) -> None:
    source = (
        "def train_one_epoch():\n    total, n = 0.0, 0\n    for x, y in loader:\n" + STEP
        + "        total += loss.item()\n        n += 1\n    seen = torch.tensor(float(n))\n    dist.all_reduce(seen)\n"
        "    print(seen.item())\n    return total / n\n\n\n"
        "for epoch in range(30):\n    sampler.set_epoch(epoch)\n    train_loss = train_one_epoch()\n    if train_loss < 0.01:\n        break\n"
    )
    found = lint(tmp_path, source, "DDP041")
    assert len(found) == 1 and "`train_loss < 0.01` decides on train_loss" in found[0], found


def test_a_handler_that_exits_with_success_leaves_the_others_waiting(tmp_path: Path) -> None:
    source = (
        "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    for x, y in loader:\n        try:\n"
        "            loss = ((model(x) - y) ** 2).mean()\n            loss.backward()\n        except RuntimeError:\n"
        "            sys.exit(0)\n        opt.step()\n"
    )
    assert len(lint(tmp_path, source, "DDP049")) == 1
    assert lint(tmp_path, source.replace("sys.exit(0)", "sys.exit(1)"), "DDP049") == []


@pytest.mark.parametrize(
    "source",
    [
        # Weights loaded on rank 0 after the wrap, then broadcast to every rank.
        "if dist.get_rank() == 0:\n    model.module.load_state_dict(torch.load('init.pt'))\n"
        "for p in model.module.parameters():\n    dist.broadcast(p.data, 0)\n"
        "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    for x, y in loader:\n" + STEP,
        # A check that raises on rank 0 inside the loop stops the job: no hang.
        "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    for x, y in loader:\n" + STEP
        + "    if dist.get_rank() == 0:\n        if loss.item() != loss.item():\n            raise RuntimeError('loss is NaN')\n",
        # A main() whose try wraps the whole training: a failure ends the process, torchrun stops the others.
        "def main():\n    try:\n        for epoch in range(3):\n            sampler.set_epoch(epoch)\n"
        "            for x, y in loader:\n                loss = ((model(x) - y) ** 2).mean()\n                opt.zero_grad()\n"
        "                loss.backward()\n                opt.step()\n    except Exception as error:\n        print(error)\n"
        "        return 1\n    return 0\n\n\nsys.exit(main())\n",
    ],
)
def test_correct_programs_the_review_caught_as_false_alarms(source: str, tmp_path: Path) -> None:
    assert lint(tmp_path, source, "DDP041,DDP049") == []


def test_a_wrap_whose_cpu_path_refuses_to_run_is_no_unwrapped_cpu_training(tmp_path: Path) -> None:
    source = (
        "import torch\nimport torch.nn as nn\nfrom ddp_migrate import runtime\n\n"
        "model = nn.Linear(4, 1).to(runtime.device())\n"
        "if torch.cuda.is_available():\n    model = nn.parallel.DistributedDataParallel(model, device_ids=runtime.device_ids())\n"
        "else:\n    raise RuntimeError('this program needs a GPU')\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel(torch.randn(2, 4)).sum().backward()\n"
    )
    path = tmp_path / "gpu.py"
    path.write_text(source)
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP011", str(path)])
    assert result.exit_code == 0, result.output
    path.write_text(source.replace("    raise RuntimeError('this program needs a GPU')\n", "    print('CPU')\n"))
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP011", str(path)])
    assert "DDP011 DistributedDataParallel only on a machine with CUDA" in result.output, result.output


def test_a_decorator_whose_wrapper_also_calls_the_function_on_every_rank_guards_nothing(tmp_path: Path) -> None:
    source = (
        "import functools\n\n\ndef logged(func):\n    @functools.wraps(func)\n    def wrapper(*args, **kwargs):\n"
        "        if dist.get_rank() == 0:\n            print('saving')\n            return func(*args, **kwargs)\n"
        "        return func(*args, **kwargs)\n    return wrapper\n\n\n"
        "@logged\ndef save(path):\n    torch.save(model.module.state_dict(), path)\n\n\n"
        "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    for x, y in loader:\n" + STEP + "    save('last.pt')\n"
    )
    found = lint(tmp_path, source, "DDP007")
    assert len(found) == 1 and "torch.save runs on every process" in found[0], found


def test_a_collective_in_a_function_run_on_rank_zero_only_by_its_decorator_is_reported(tmp_path: Path) -> None:
    source = (
        "from pytorch_lightning.utilities import rank_zero_only\n\n\n"
        "@rank_zero_only\ndef log_loss(loss):\n    dist.all_reduce(loss)\n    print(loss.item())\n\n\n"
        "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    for x, y in loader:\n" + STEP + "    log_loss(loss.detach())\n"
    )
    found = lint(tmp_path, source, "DDP033")
    assert len(found) == 1 and "collective in a function that @rank_zero_only runs on rank 0 only" in found[0], found


def test_backward_on_some_ranks_only_of_a_loss_computed_before_the_branch_is_reported(tmp_path: Path) -> None:
    source = (
        "rank = dist.get_rank()\nfor epoch in range(3):\n    sampler.set_epoch(epoch)\n    for x, y in loader:\n"
        "        loss = ((model(x) - y) ** 2).mean()\n        opt.zero_grad()\n        if rank != 1:\n"
        "            loss.backward()\n        opt.step()\n"
    )
    found = lint(tmp_path, source, "DDP041")
    assert len(found) == 1 and "`rank != 1` holds on some ranks only" in found[0] and "backward()" in found[0], found


def test_a_successful_raise_of_system_exit_in_a_helper_leaves_the_others_waiting(tmp_path: Path) -> None:
    source = (
        "def check(total):\n    if total < 5.0:\n        raise SystemExit(0)\n\n\n"
        "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    total = 0.0\n    for x, y in loader:\n" + STEP
        + "        total += loss.item()\n    check(total)\n"
    )
    found = lint(tmp_path, source, "DDP041")
    assert len(found) == 1 and "`total < 5.0` decides on total" in found[0], found


SHARED_HELPER = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

GLOBAL_STATE


def accuracy(output, target):
    BODY


def main():
    ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    train_loader = DataLoader(ds, batch_size=8, shuffle=True)
    VAL_LOADER
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    best = 0.0
    for epoch in range(3):
        for x, y in train_loader:
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            train_acc = accuracy(out, y)
        with torch.no_grad():
            acc = sum(accuracy(model(x), y) for x, y in val_loader) / len(val_loader)
        if acc > best:
            best = acc
            torch.save(model.state_dict(), "best.pt")


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("global_state", "body", "val_loader", "reviewed"),
    [
        ("", "return (output.argmax(1) == target).float().mean().item()", "val_loader = DataLoader(ds, batch_size=8)", False),
        (
            "",
            "return (output.argmax(1) == target).float().mean().item()",
            "val_loader = DataLoader(ds, batch_size=8, sampler=torch.utils.data.distributed.DistributedSampler(ds, shuffle=False))",
            True,
        ),
        # The helper also reads a value of its module that the training shard fills: per-rank whatever its arguments.
        (
            "SEEN = []",
            "SEEN.append(output)\n    return (torch.cat(SEEN).argmax(1)[: len(target)] == target).float().mean().item()",
            "val_loader = DataLoader(ds, batch_size=8)",
            True,
        ),
    ],
    ids=["whole-evaluation", "sharded-evaluation", "helper-reads-a-per-rank-global"],
)
def test_a_helper_shared_by_training_and_evaluation_is_per_rank_only_where_its_arguments_are(
    tmp_path: Path, global_state: str, body: str, val_loader: str, reviewed: bool
) -> None:
    """A trial's false review (pytorch/examples' ImageNet shape): ``accuracy(output, target)`` called on the
    training batch made its every result per-rank, so ``acc > best`` over a whole evaluation got a DDP041 TODO."""
    (tmp_path / "train.py").write_text(SHARED_HELPER.replace("GLOBAL_STATE", global_state).replace("BODY", body).replace("VAL_LOADER", val_loader))
    result = CliRunner().invoke(cli, ["--diff", str(tmp_path / "train.py")])
    assert ("DDP041 `acc > best`" in result.output) is reviewed, result.output
