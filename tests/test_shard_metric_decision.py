"""DDP041 through a real migration: a single-device script that steps ReduceLROnPlateau and stops early on
its training loss computes that loss on one shard per rank once migrated. The ranks would decide apart (the
trial run diverged, then failed when one rank left the loop), so the migration must leave both decisions to
a human; the same decisions on a validation loss over the whole set are the same on every rank."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

SCRIPT = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    with torch.no_grad():
        return sum(nn.functional.mse_loss(model(a), b).item() for a, b in loader)


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train_loader = DataLoader(data, batch_size=8, shuffle=True)
    val_loader = DataLoader(data, batch_size=8)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=1)
    best, bad = float("inf"), 0
    for epoch in range(20):
        train_loss = 0.0
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            train_loss += loss.item()
        scheduler.step({metric})
        if {metric} > best - 1e-4:
            bad += 1
            if bad >= 2:
                break
        best = min(best, {metric})


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(("metric", "reported"), [("train_loss", 2), ("evaluate(model, val_loader)", 0)])
def test_decisions_on_a_shard_metric_are_left_to_a_human(metric: str, reported: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(SCRIPT.format(metric=metric))
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    reviews = [line for line in result.output.splitlines() if line.lstrip().startswith("review ") and "DDP041" in line]
    assert len(reviews) == reported, result.output
    if reported:
        assert any("scheduler.step() steps on train_loss" in line for line in reviews)
        assert any("`train_loss > best - 1e-4` decides on train_loss" in line for line in reviews)


def test_a_shard_metric_returned_by_another_module_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The torchvision/timm layout: engine.py trains and returns its averaged metrics, main.py stops early on
    # them. A trial's ranks left the loop apart (gloo: connection closed by peer) while the report said
    # nothing; the same code in one file was reported.
    monkeypatch.chdir(tmp_path)
    Path("engine.py").write_text(
        "import torch\n\n\n"
        "def train_one_epoch(model, optimizer, loader):\n"
        "    total = 0.0\n"
        "    for x, y in loader:\n"
        "        optimizer.zero_grad()\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        total += loss.item()\n"
        '    return {"loss": total / len(loader)}\n'
    )
    Path("main.py").write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n\n"
        "from engine import train_one_epoch\n\n\n"
        "def main():\n"
        "    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)\n"
        "    model = torch.nn.Linear(4, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        '    best = float("inf")\n'
        "    for epoch in range(10):\n"
        "        stats = train_one_epoch(model, optimizer, loader)\n"
        '        if stats["loss"] >= best:\n'
        "            break\n"
        '        best = stats["loss"]\n\n\n'
        'if __name__ == "__main__":\n'
        "    main()\n"
    )
    result = CliRunner().invoke(cli, ["main.py"], catch_exceptions=False)
    reviews = [line for line in result.output.splitlines() if line.lstrip().startswith("review ") and "DDP041" in line]
    assert len(reviews) == 1, result.output
    assert 'main.py:' in reviews[0] and '`stats["loss"] >= best` decides on stats' in reviews[0]


def test_a_training_loop_left_on_the_process_s_clock_is_reviewed(tmp_path: Path) -> None:
    """A trial's time budget (``if time.time() - start > BUDGET: break``) hung 5 of 6 torchrun runs: one rank
    left for the final save's barrier while the other was a step behind in backward's all-reduce."""
    from migrated import migrate_script

    source = """
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = time.time()
    for epoch in range(100):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            elapsed = time.time() - start
            if elapsed > 2.0:
                break
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
"""
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 1, report
    assert "DDP041 `elapsed > 2.0` decides on `elapsed`, this process's own clock" in report, report


def test_a_clock_decision_shared_by_a_collective_or_skipping_a_log_line_is_not_reviewed(tmp_path: Path) -> None:
    from migrated import migrate_script

    source = """
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = last_log = time.time()
    for epoch in range(100):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if time.time() - last_log < 5.0:
                continue
            last_log = time.time()
        out = torch.tensor(float(time.time() - start > 2.0))
        if dist.is_initialized():
            dist.all_reduce(out, op=dist.ReduceOp.MAX)
        if out.item() > 0:
            break


if __name__ == "__main__":
    main()
"""
    _, report, _ = migrate_script(tmp_path, source)
    assert "own clock" not in report, report


GATED = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = 0
    for epoch in range(3):
        for i, (x, y) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(x), y)
{step}


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("step", "decision", "what"),
    [
        # A trial's token-count accumulation: each rank stepped on its own count (weight checksums 3.30 / 4.24).
        (
            "            loss.backward()\n            seen += int((y == 1).sum())\n            if seen >= 10:\n"
            "                opt.step()\n                opt.zero_grad()\n                seen = 0",
            "`seen >= 10` decides on seen",
            "whether the optimizer steps",
        ),
        (
            "            opt.zero_grad()\n            if loss.item() < 0.7:\n                loss.backward()\n                opt.step()",
            "`loss.item() < 0.7` decides on loss",
            "whether this step runs backward()",
        ),
        # Through a helper of the program that runs backward().
        (
            "            if y.float().mean() > 0.5:\n                train_step(loss, opt)",
            "`y.float().mean() > 0.5` decides on y",
            "whether this step runs backward()",
        ),
    ],
)
def test_a_step_taken_on_a_shard_value_is_left_to_a_human(step: str, decision: str, what: str, tmp_path: Path) -> None:
    from migrated import migrate_script

    source = GATED.format(step=step).replace(
        "\n\ndef main():", "\n\ndef train_step(loss, opt):\n    loss.backward()\n    opt.step()\n    opt.zero_grad()\n\n\ndef main():"
    )
    _, report, code = migrate_script(tmp_path, source)
    reviews = [line for line in report.splitlines() if "DDP041" in line]
    assert code == 1 and len(reviews) == 1, report
    assert decision in reviews[0] and what in reviews[0], report


@pytest.mark.parametrize(
    "step",
    [
        # Accumulation on the batch index, the same on every rank.
        "            (loss / 4).backward()\n            if (i + 1) % 4 == 0 or i + 1 == len(loader):\n"
        "                opt.step()\n                opt.zero_grad()",
        # Both branches run backward() and step: every rank does it once, whatever it decides.
        "            if loss.item() > 1.0:\n                (loss * 0.5).backward()\n            else:\n                loss.backward()\n"
        "            opt.step()\n            opt.zero_grad()",
        # A decision on a setting.
        "            if seen == 0:\n                loss.backward()\n                opt.step()",
    ],
)
def test_steps_decided_alike_on_every_rank_are_not_reviewed(step: str, tmp_path: Path) -> None:
    from migrated import migrate_script

    _, report, _ = migrate_script(tmp_path, GATED.format(step=step))
    assert "DDP041" not in report, report


EPOCHS = """
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def check_done(acc, epoch):
    if acc >= 0.9:
        print(f"target reached at epoch {{epoch}}")
        sys.exit(0)


def main():
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hard, best, bad, epoch, train_loss = [], float("inf"), 0, 0, float("inf")
{loop}


if __name__ == "__main__":
    main()
"""

TRAIN = """
        correct = seen = 0
        epoch_loss = 0.0
        for x, y in loader:
            opt.zero_grad()
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
            epoch_loss += loss.item()
            correct += int((out.argmax(1) == y).sum())
            seen += len(y)"""


@pytest.mark.parametrize(
    ("loop", "decision"),
    [
        # A helper the epoch loop calls ends the process on this rank's accuracy: the other rank waits.
        ("    for epoch in range(20):" + TRAIN + "\n        check_done(correct / seen, epoch)", "`acc >= 0.9` decides on acc"),
        # A while loop on this rank's training loss.
        ("    while train_loss > 0.1 and epoch < 20:" + TRAIN + "\n        train_loss = epoch_loss\n        epoch += 1",
         "`train_loss > 0.1 and epoch < 20` decides on train_loss"),
        # Hard examples kept on this rank's losses, replayed once enough are kept: another number of steps per rank.
        ("    for epoch in range(3):" + TRAIN + "\n            if loss.item() > 0.7:\n                hard.append((x, y))\n"
         "            if len(hard) >= 4:\n                for hx, hy in hard:\n"
         "                    nn.functional.cross_entropy(model(hx), hy).backward()\n                hard.clear()",
         "`len(hard) >= 4` decides on len(hard)"),
        # A plateau rule written out: the learning rate halves on this rank's loss.
        ("    for epoch in range(6):" + TRAIN + "\n        if epoch_loss < best:\n            best, bad = epoch_loss, 0\n"
         "        else:\n            bad += 1\n        if bad >= 2:\n            for group in opt.param_groups:\n"
         "                group['lr'] *= 0.5", "whether the learning rate changes"),
        # A curriculum that moves on to other data on this rank's loss.
        ("    for epoch in range(6):" + TRAIN + "\n        if epoch_loss < 5.0:\n"
         "            loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,))), batch_size=8, shuffle=True)",
         "only, which data the training goes on with"),
    ],
)
def test_decisions_on_shard_values_outside_an_if_that_leaves_are_reviewed(loop: str, decision: str, tmp_path: Path) -> None:
    from migrated import migrate_script

    _, report, code = migrate_script(tmp_path, EPOCHS.format(loop=loop))
    assert code == 1 and decision in report, report


def test_a_list_filled_on_every_batch_has_the_same_length_on_every_rank(tmp_path: Path) -> None:
    from migrated import migrate_script

    loop = ("    for epoch in range(3):" + TRAIN + "\n            hard.append((x, y))\n            if len(hard) >= 4:\n"
            "                for hx, hy in hard:\n                    nn.functional.cross_entropy(model(hx), hy).backward()\n"
            "                hard.clear()")
    _, report, _ = migrate_script(tmp_path, EPOCHS.format(loop=loop))
    assert "DDP041" not in report, report


@pytest.mark.parametrize(("seed", "reported"), [("", True), ("    random.seed(0)\n", False)])
def test_an_extra_step_drawn_from_an_unseeded_random_state_is_reviewed(seed: str, reported: bool, tmp_path: Path) -> None:
    # A trial: ``if random.random() < p:`` ran an extra adversarial backward pass on different steps per rank
    # (each process seeds Python's random on its own); the run failed on one rank, the report said nothing.
    from migrated import migrate_script

    source = "import random\n" + GATED.format(
        step="            loss.backward()\n            if random.random() < 0.3:\n"
        "                nn.functional.cross_entropy(model(x + 0.1), y).backward()\n            opt.step()\n            opt.zero_grad()"
    ).replace("    seen = 0\n", "    seen = 0\n" + seed)
    _, report, _ = migrate_script(tmp_path, source)
    assert ("DDP041 `random.random() < 0.3` decides on random.random(), which each process draws" in report) is reported, report


LINT_HEAD = """
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(nn.Linear(10, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(train_set, batch_size=16, sampler=DistributedSampler(train_set))
val_loader = DataLoader(val_set, batch_size=16)
best, bad = 0.0, 0


def run_epoch(net, data, optimizer=None):
    for x, y in data:
        loss = nn.functional.cross_entropy(net(x), y)
        if optimizer is not None:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return loss.item()


"""


@pytest.mark.parametrize(
    "body",
    [
        # Rank 0 evaluates a copy and keeps the best model (a review's false alarm: "computed on this rank's shard").
        "for epoch in range(10):\n    run_epoch(model, loader, opt)\n    if rank == 0:\n        with torch.no_grad():\n"
        "            acc = sum((model.module(vx).argmax(1) == vy).sum().item() for vx, vy in val_loader)\n"
        "        if acc > best:\n            best = acc\n            torch.save(model.module.state_dict(), 'best.pt')\n",
        # A function shared by training and evaluation, handed the inner model on rank 0.
        "for epoch in range(10):\n    run_epoch(model, loader, opt)\n    if rank == 0:\n        with torch.no_grad():\n"
        "            print(run_epoch(model.module, val_loader))\n",
        # A learning rate logged (not set) on rank 0.
        "for epoch in range(10):\n    run_epoch(model, loader, opt)\n    if rank == 0:\n        logs = {'epoch': epoch}\n"
        "        logs['lr'] = opt.param_groups[0]['lr']\n        print(logs)\n",
        # The validation loop reuses the training loop's names over the whole (unsharded) set.
        "for epoch in range(10):\n    for x, y in loader:\n        opt.zero_grad()\n"
        "        nn.functional.cross_entropy(model(x), y).backward()\n        opt.step()\n    correct = 0\n"
        "    with torch.no_grad():\n        for x, y in val_loader:\n            correct += (model(x).argmax(1) == y).sum().item()\n"
        "    if correct <= best:\n        bad += 1\n        if bad > 2:\n            break\n    best = max(best, correct)\n",
    ],
)
def test_decisions_every_rank_takes_alike_or_that_change_no_training_are_not_reported(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(LINT_HEAD + body)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP041,DDP049", "train.py"])
    assert result.exit_code == 0 and "DDP041" not in result.output and "DDP049" not in result.output, result.output


def test_a_step_stopped_by_a_failing_exit_is_not_a_swallowed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torchrun stops every process when one exits with an error: no hang, nothing swallowed.
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(
        LINT_HEAD + "for epoch in range(10):\n    for x, y in loader:\n        try:\n            opt.zero_grad()\n"
        "            nn.functional.cross_entropy(model(x), y).backward()\n            opt.step()\n"
        "        except RuntimeError as error:\n            print(f'rank {rank}: {error}')\n            sys.exit(1)\n"
        "    if best > 0.9:\n        sys.exit(1)\n"
    )
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP041,DDP049", "train.py"])
    assert result.exit_code == 0 and "DDP041" not in result.output and "DDP049" not in result.output, result.output


PARTIAL_EVAL = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
{seed}    train = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle={shuffle})
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    for epoch in range(4):
        for x, y in train:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        val_loss = 0.0
        with torch.no_grad():
            for i, (vx, vy) in enumerate(val):
                if i >= 2:
                    break
                val_loss += nn.functional.mse_loss(model(vx), vy).item()
        scheduler.step(val_loss)


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(("seed", "shuffle", "reported"), [("", "True", True), ("    torch.manual_seed(0)\n", "True", False), ("", "False", False)])
def test_a_random_part_of_an_unsharded_evaluation_is_each_process_s_own(seed: str, shuffle: str, reported: bool, tmp_path: Path) -> None:
    # A trial: two shuffled validation batches stepped ReduceLROnPlateau; unseeded, each rank validated other
    # samples and the learning rates ended 0.00162 and 0.000146, while a note called the evaluation correct.
    from migrated import migrate_script

    _, report, _ = migrate_script(tmp_path, PARTIAL_EVAL.format(seed=seed, shuffle=shuffle))
    assert ("DDP041 scheduler.step() steps on val_loss" in report) is reported, report
    assert ("each process evaluates another random part of the set" in report) is reported, report


@pytest.mark.parametrize(
    ("body", "reported"),
    [
        # A scheduler stepped, or a learning rate set through update(), on this rank's loss (a trial's ranks: 2.61 / 2.51).
        ("    tot = run_epoch(model, loader, opt)\n    if tot < 6.0:\n        scheduler.step()\n", True),
        ("    tot = run_epoch(model, loader, opt)\n    if tot < 6.0:\n        for g in opt.param_groups:\n            g.update(lr=0.01)\n", True),
        # The same decision on a value the program's own helper reduced across ranks (a trial's false alarm).
        ("    tot = reduce_tensor(torch.tensor(run_epoch(model, loader, opt)))\n    if tot.item() < 6.0:\n        scheduler.step()\n"
         "    if tot.item() < 1.0:\n        break\n", False),
    ],
)
def test_scheduler_decisions_and_the_program_s_own_reductions(body: str, reported: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    helpers = (
        "scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1)\n\n\n"
        "def reduce_tensor(t):\n    rt = t.clone()\n    dist.all_reduce(rt, op=dist.ReduceOp.SUM)\n"
        "    rt /= dist.get_world_size()\n    return rt\n\n\n"
    )
    Path("train.py").write_text(LINT_HEAD + helpers + "for epoch in range(10):\n" + body)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP041", "train.py"])
    assert ("DDP041" in result.output) is reported, result.output


BEST = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def save_checkpoint(model, path):
    torch.save({"model": model.state_dict()}, path)


def evaluate(model, loader):
    with torch.no_grad():
        return sum(nn.functional.mse_loss(model(a), b).item() for a, b in loader)


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train_loader = DataLoader(data, batch_size=8, shuffle=True)
    val_loader = DataLoader(data, batch_size=8)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    best = float("inf")
    for epoch in range(5):
        running = 0.0
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            running += loss.item()
        if METRIC < best:
            best = METRIC
            SAVE


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("save", ['torch.save(model.state_dict(), "best.pt")', 'save_checkpoint(model, "best.pt")'], ids=["inline", "helper"])
@pytest.mark.parametrize(("metric", "reported"), [("running", True), ("evaluate(model, val_loader)", False)], ids=["train-loss", "whole-validation"])
def test_a_best_checkpoint_chosen_on_a_shard_metric_is_left_to_a_human(save: str, metric: str, reported: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two trials: ``if running < best: torch.save(...)`` on the epoch's training loss saved, once migrated, the
    checkpoint rank 0's shard called best (epoch 6 where the original and a world of one kept epoch 3), with
    "0 item(s) need a human". A metric of the whole validation set is the same on every rank."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(BEST.replace("METRIC", metric).replace("SAVE", save))
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    reviews = [line for line in result.output.splitlines() if line.lstrip().startswith("review ") and "DDP041" in line]
    assert bool(reviews) is reported, result.output
    if reported:
        assert "`running < best` decides on running, computed on this rank's shard of the data only, whether a checkpoint is saved" in reviews[0]


WHOLE_EVALUATION = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16, shuffle=True)
val_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=16)
state = {"global_step": 0, "log_history": []}


@torch.no_grad()
def estimate_loss():
    losses = []
    for x, y in val_loader:
        loss = nn.functional.mse_loss(model(x), y)
        losses.append(loss.item())
    return sum(losses) / len(losses)


best = 1e9
for epoch in range(3):
    for x, y in train_loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        state["global_step"] += 1
        state["log_history"].append(loss.item())
        if state["global_step"] % 3 == 0:
            torch.save(model.state_dict(), "last.pt")
    val_loss = estimate_loss()
    if val_loss < best:
        best = val_loss
        torch.save(model.state_dict(), "best.pt")
'''


def test_saves_decided_on_a_whole_evaluation_or_a_schedule_are_not_reviewed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-trial: an evaluation function's own ``loss`` (the training loop's module-level name spelled alike)
    was read as the training loss, and a step counter kept in a dict beside per-rank logs as a shard value."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(WHOLE_EVALUATION)
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    assert "DDP041" not in result.output, result.output


def test_a_schedule_that_also_reads_a_shard_metric_is_reviewed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``if epoch % 2 == 0 and running < best:``: the schedule does not make the metric every rank's."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(BEST.replace("METRIC < best", "epoch % 2 == 0 and running < best").replace("METRIC", "running").replace("SAVE", 'torch.save(model.state_dict(), "best.pt")'))
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    assert "DDP041 `epoch % 2 == 0 and running < best` decides on running" in result.output, result.output


WHOLE_SET_IN_A_COMPREHENSION = '''
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    train_loader = DataLoader(TensorDataset(torch.randn(64, 3), torch.randn(64, 1)), batch_size=8)
    val_loader = DataLoader(TensorDataset(torch.randn(32, 3), torch.randn(32, 1)), batch_size=16)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    best = float("inf")
    for epoch in range(3):
        for x, y in train_loader:
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            v = sum(F.mse_loss(model(x), y).item() for x, y in VALIDATION)
        if v < best:
            best = v
            torch.save(model.state_dict(), "best.pt")


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("validation, reviewed", [("val_loader", False), ("train_loader", True)])
def test_a_comprehension_over_the_whole_validation_set_is_common(tmp_path: Path, validation: str, reviewed: bool) -> None:
    """A trial's needless review: the generator's ``x, y`` (its own variables, over the unsharded validation
    loader) were read as the training loop's per-rank batch. Over the sharded training loader it is a shard's."""
    script = tmp_path / "train.py"
    script.write_text(WHOLE_SET_IN_A_COMPREHENSION.replace("VALIDATION", validation))
    result = CliRunner().invoke(cli, [str(script)], catch_exceptions=False)
    assert ("DDP041" in result.output) is reviewed, result.output


BEST_COPY = '''
import os
import shutil

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def train_epoch(model, opt, loader):
    correct = 0
    for x, y in loader:
        out = model(x)
        opt.zero_grad()
        F.cross_entropy(out, y).backward()
        opt.step()
        correct += (out.argmax(1) == y).sum().item()
    return correct / len(loader.dataset)


def main():
    x = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16, shuffle=True)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    best = 0.0
    os.makedirs("out", exist_ok=True)
    for epoch in range(3):
        acc = train_epoch(model, opt, loader)
        is_best = acc > best
        best = max(acc, best)
        torch.save(model.state_dict(), "out/last.pt")
        if is_best:
            shutil.copyfile("out/last.pt", "out/best.pt")


if __name__ == "__main__":
    main()
'''


def test_a_best_checkpoint_copied_on_a_shard_metric_is_reviewed(tmp_path: Path) -> None:
    """A trial: ``if is_best: shutil.copyfile(last, best)`` (the ImageNet example's idiom) on the training
    accuracy, which each rank now computes on its share: rank 0 alone chose the best file, with no review."""
    script = tmp_path / "train.py"
    script.write_text(BEST_COPY)
    result = CliRunner().invoke(cli, [str(script)], catch_exceptions=False)
    assert "DDP041 `is_best`" in result.output and "whether a checkpoint is saved" in result.output, result.output


LOOPS_IN_A_FORWARD = '''
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Adaptive(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block(x))
            if x.abs().mean() < 0.35:
                break
        return self.out(x)


def evaluate(model, loader):
    total = torch.zeros(())
    with torch.no_grad():
        for x, y in loader:
            total += y.abs().mean()
            SYNC
            if total > 10:
                break
    return total


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = Adaptive()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        evaluate(model, loader)


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(("sync", "reported"), [("pass", []), ("dist.barrier()", ["total > 10"])], ids=["no-collective", "collective"])
def test_a_loop_left_apart_matters_only_where_it_runs_a_step_or_a_collective(sync: str, reported: list[str], tmp_path: Path) -> None:
    """The adaptive depth of a model's ``forward()`` (``if x.abs().mean() < eps: break`` over its layers) runs no step
    and no collective: ranks that leave it apart stay together (DDP looks for unused parameters); so does a pass that
    only sums. A pass that waits at a barrier on every batch does not: a rank that leaves it early leaves the others
    waiting."""
    path = tmp_path / "train.py"
    path.write_text(LOOPS_IN_A_FORWARD.replace("SYNC", sync))
    result = CliRunner().invoke(cli, [str(path)], catch_exceptions=False)
    found = [test for test in ("x.abs().mean() < 0.35", "total > 10") if f"DDP041 `{test}`" in result.output]
    assert found == reported, result.output
