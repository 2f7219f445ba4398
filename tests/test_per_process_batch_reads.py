"""Numbers that read the loader's batch size once it is split across the processes (DDP047).

Trials: ``if xb.size(0) < BATCH_SIZE: continue`` (drop the last, incomplete batch) skipped every batch of the
migrated program, whose processes load ``BATCH_SIZE / N`` samples a step (0 optimizer steps, exit 0); a
budget of samples (``seen += xb.size(0)``; ``if seen >= budget: break``) was reached after twice as many
steps; ``len(ds) // loader.batch_size`` doubled a OneCycle schedule's length. The comparison now reads the
per-process size; the counts and ``loader.batch_size`` are left to a human, each at its line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_python, run_torchrun
from migrated import migrate_script, train_original_and_migrated

SKIP_INCOMPLETE = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

BATCH_SIZE = 8


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(36, 4), torch.randn(36, 1)), batch_size=BATCH_SIZE)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    for epoch in range(2):
        for xb, yb in loader:
            if xb.size(0) < BATCH_SIZE:  # the last, incomplete batch
                continue
            opt.zero_grad()
            nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
            steps += 1
    print(f"steps {steps} weight {model.weight.sum().item():.5f}", flush=True)


if __name__ == "__main__":
    main()
'''

BUDGET = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps_per_epoch = len(loader.dataset) // loader.batch_size
    seen = 0
    for epoch in range(100):
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
            seen += xb.size(0)
        if seen >= 120:
            break
    print(steps_per_epoch)


if __name__ == "__main__":
    main()
'''


def test_a_batch_is_compared_with_the_per_process_batch_size(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, SKIP_INCOMPLETE)
    assert code == 0, report
    assert "if xb.size(0) < runtime.per_process_batch_size(BATCH_SIZE):  # the last, incomplete batch" in migrated
    assert "DDP047 line 17: a batch compared with the per-process batch size" in report, report


def test_sample_budgets_and_loader_batch_size_are_left_to_a_human(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, BUDGET)
    assert code == 1, report
    reviews = [line for line in report.splitlines() if "DDP047" in line]
    assert len(reviews) == 2, report
    assert "loader.batch_size is now this process's batch size" in reviews[0]
    assert "`seen += xb.size(0)` counts this process's samples only, and `seen >= 120` decides when training stops" in reviews[1]
    assert migrated.count("# TODO(ddp-migrate): ") == 2


@pytest.mark.distributed
def test_the_migrated_loop_steps_as_often_as_the_original(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "original").mkdir()
    (tmp_path / "original" / "train.py").write_text(SKIP_INCOMPLETE)
    expected = run_python(tmp_path / "original" / "train.py", cwd=tmp_path / "original", timeout=120).output
    assert "steps 8 " in expected, expected
    migrate_script(tmp_path, SKIP_INCOMPLETE)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    weight = expected.split("weight ")[1].split()[0]
    assert f"steps 8 weight {weight}" in launch.output, (expected, launch.output)


@pytest.mark.parametrize(
    ("change", "kept"),
    [
        # another dimension than the batch's is no batch size
        (('            if xb.size(0) < BATCH_SIZE:  # the last, incomplete batch\n                continue\n', '            assert xb.size(-1) == 4 and xb.shape[1] != BATCH_SIZE\n'), "xb.shape[1] != BATCH_SIZE"),
        # padding the batch up to the global size: both reads are the global batch, left to a human
        (
            ('            if xb.size(0) < BATCH_SIZE:  # the last, incomplete batch\n                continue\n',
             '            if xb.size(0) < BATCH_SIZE:\n                xb = torch.cat([xb, xb.new_zeros(BATCH_SIZE - xb.size(0), 4)])\n                yb = torch.cat([yb, yb.new_zeros(BATCH_SIZE - yb.size(0), 1)])\n'),
            "if xb.size(0) < BATCH_SIZE:",
        ),
        # an unsharded evaluation loop inside the training loop reusing the batch's names
        (
            ('            steps += 1\n', '            steps += 1\n            for xb, yb in val_loader:\n                if xb.size(0) < BATCH_SIZE:\n                    continue\n'),
            "                if xb.size(0) < BATCH_SIZE:\n                    continue",
        ),
    ],
    ids=["other-dimension", "padding", "nested-evaluation"],
)
def test_reads_that_are_not_this_loop_s_batch_size_are_left_alone(tmp_path: Path, change: tuple[str, str], kept: str) -> None:
    source = SKIP_INCOMPLETE.replace(*change).replace(
        "    model = nn.Linear(4, 1)\n", "    model = nn.Linear(4, 1)\n    val_loader = DataLoader(TensorDataset(torch.randn(20, 4), torch.randn(20, 1)), batch_size=BATCH_SIZE)\n"
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert kept in migrated, migrated
    # the training loop's own ``if xb.size(0) < BATCH_SIZE: continue`` (kept in the nested case) is rewritten
    assert report.count("DDP047 line") == (1 if "val_loader:" in change[1] else 0), report


def test_a_counter_reused_by_a_later_loop_is_no_budget(tmp_path: Path) -> None:
    source = BUDGET.replace("        if seen >= 120:\n            break\n", "        if epoch >= 1:\n            break\n").replace(
        "    print(steps_per_epoch)\n",
        "    for xb, yb in DataLoader(TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=8):\n"
        "        if seen >= 32:\n            break\n    print(steps_per_epoch)\n",
    )
    assert "if seen >= 32" in source
    _, report, _ = migrate_script(tmp_path, source)
    assert "counts this process's samples only" not in report, report


@pytest.mark.parametrize(
    ("setting", "reported"),
    [
        ('            for group in opt.param_groups:\n                group["lr"] = 0.1 * min(1.0, seen / 64)\n', True),
        ('            lr = 0.1 * min(1.0, seen / 64)\n            for group in opt.param_groups:\n                group["lr"] = lr\n', True),
        # A warm-up over steps is the same on every rank.
        ('            for group in opt.param_groups:\n                group["lr"] = 0.1 * min(1.0, step / 8)\n', False),
    ],
)
def test_a_warm_up_over_this_process_s_samples_is_left_to_a_human(setting: str, reported: bool, tmp_path: Path) -> None:
    # A trial: the learning rate followed ``samples_seen += inputs.size(0)``; each rank counted half the
    # samples, so the warm-up took twice as many steps (final lr 0.094 against 0.1) and nothing was reported.
    source = BUDGET.replace("        if seen >= 120:\n            break\n", "").replace(
        "            seen += xb.size(0)\n", "            seen += xb.size(0)\n            step = epoch\n" + setting
    ).replace("range(100)", "range(3)")
    _, report, _ = migrate_script(tmp_path, source)
    found = [line for line in report.splitlines() if "sets the learning rate from it" in line]
    assert len(found) == int(reported), report
    if reported:
        assert "DDP047 `seen += xb.size(0)` counts this process's samples only" in found[0]


def test_a_learning_rate_logged_from_a_sample_count_sets_nothing(tmp_path: Path) -> None:
    source = BUDGET.replace("        if seen >= 120:\n            break\n", "").replace(
        "            seen += xb.size(0)\n",
        "            seen += xb.size(0)\n            logs = {}\n            logs['lr'] = 0.1 * min(1.0, seen / 64)\n            print(logs)\n",
    ).replace("range(100)", "range(3)")
    _, report, _ = migrate_script(tmp_path, source)
    assert "sets the learning rate from it" not in report, report


def test_a_batch_compared_on_another_axis_is_reviewed(tmp_path: Path) -> None:
    """A sequence-first batch (``pad_sequence`` without batch_first): ``if src.size(1) != BATCH_SIZE: continue``
    skipped every batch under torchrun, with nothing to review (a trial); a feature axis looks the same to the
    analysis, so it is a review line, not a rewrite."""
    source = SKIP_INCOMPLETE.replace("if xb.size(0) < BATCH_SIZE:", "if xb.size(1) != BATCH_SIZE:")
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "if xb.size(1) != BATCH_SIZE:" in migrated, migrated
    reviews = [line for line in report.splitlines() if line.strip().startswith("review") and "DDP047" in line]
    assert len(reviews) == 1 and "if that axis holds the samples" in reviews[0], report


ANNEALED = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(256, 4), torch.randn(256, 4)), batch_size=32)
model = nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
seen = 0
for epoch in range(3):
    for x, y in loader:
        WEIGHT
        loss = ((model(x) - y) ** 2).mean() + beta * model.weight.pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += x.size(0)
    print(epoch, seen, beta)
'''


@pytest.mark.parametrize(
    ("weight", "reported"),
    [
        ("beta = min(1.0, seen / 512)", True),
        ("ramp = seen / 512\n        beta = min(1.0, ramp)", True),
        # An annealing over epochs is the same on every rank.
        ("beta = min(1.0, epoch / 2)", False),
    ],
    ids=["over-samples", "through-a-name", "over-epochs"],
)
def test_a_loss_weight_annealed_over_this_process_s_samples_is_left_to_a_human(weight: str, reported: bool, tmp_path: Path) -> None:
    # A trial: a KL-style weight followed ``seen += x.size(0)``; each rank counted half the samples, so the
    # weight reached 0.72 where the original's was 1.0 (checksums 1.510 against 1.125), with no review.
    _, report, _ = migrate_script(tmp_path, ANNEALED.replace("WEIGHT", weight))
    found = [line for line in report.splitlines() if "weighs the loss with it" in line]
    assert len(found) == int(reported), report
    if reported:
        assert "DDP047 `seen += x.size(0)` counts this process's samples only" in found[0]


CONFIGURED = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

CFG = {"data": {"batch_size": 16, "eval_batch_size": 64}}


def train(cfg):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(70, 8), torch.randn(70, 1))
    dcfg = cfg["data"]
    bs = dcfg["batch_size"]
    loader = DataLoader(data, batch_size=dcfg["batch_size"])
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for xb, yb in loader:
            if CHECK:
                continue
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()


train(CFG)
'''


@pytest.mark.parametrize(
    ("check", "rewritten"),
    [
        ('xb.size(0) != cfg["data"]["batch_size"]', 'xb.size(0) != runtime.per_process_batch_size(cfg["data"]["batch_size"])'),
        ("xb.shape[0] != bs", "xb.shape[0] != runtime.per_process_batch_size(bs)"),
        ("len(xb) < dcfg['batch_size']", "len(xb) < runtime.per_process_batch_size(dcfg['batch_size'])"),
    ],
    ids=["the-config-read-again", "a-name-that-holds-it", "the-other-quote"],
)
def test_the_global_batch_read_through_another_spelling_is_the_per_process_size_too(check: str, rewritten: str, tmp_path: Path) -> None:
    # A trial: the loader took dcfg["batch_size"], the loop skipped batches whose size was not
    # cfg["data"]["batch_size"]: every batch of 8 was skipped on 2 processes, 0 steps, exit 0, nothing reported.
    migrated, report, code = migrate_script(tmp_path, CONFIGURED.replace("CHECK", check))
    assert f"if {rewritten}:" in migrated, migrated
    assert "a batch compared with the per-process batch size" in report and code == 0, report


def test_another_configured_number_is_no_batch_size(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, CONFIGURED.replace("CHECK", 'xb.size(0) != cfg["data"]["eval_batch_size"]'))
    assert 'if xb.size(0) != cfg["data"]["eval_batch_size"]:' in migrated and "DDP047" not in report, report


JOINED = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

BATCH = 8
torch.manual_seed(0)
labelled = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,))), batch_size=BATCH, drop_last=True)
unlabelled = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=BATCH, drop_last=True)
model = nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for (x, y), (u,) in zip(labelled, unlabelled):
        batch_size = BATCH
        logits = model(torch.cat([x, u]))
        loss = F.cross_entropy(logits[:batch_size], y) + logits[batch_size:].pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, sum(p.abs().sum().item() for p in model.parameters()))
'''


def test_a_joined_batch_is_cut_at_the_per_process_size(tmp_path: Path) -> None:
    # A trial (FixMatch's step): logits[:batch_size] of model(cat([x, u])) took the labelled half plus unlabelled
    # samples on 2 processes (checksum 28.57 against 30.61), with no review.
    migrated, report, code = migrate_script(tmp_path, JOINED)
    assert "logits[:runtime.per_process_batch_size(batch_size)], y)" in migrated, migrated
    assert "logits[runtime.per_process_batch_size(batch_size):].pow(" in migrated, migrated
    assert "a batch cut at the per-process batch size" in report and code == 0, report


@pytest.mark.distributed
def test_the_cut_trains_the_originals_weights_under_torchrun(tmp_path: Path) -> None:
    original, migrated, launch = train_original_and_migrated(tmp_path, JOINED)
    expected = run_python(original / "train.py", cwd=original).stdout.split()[-1]
    assert launch.stdout.split()[-1][:8] == expected[:8], (launch.stdout, expected)


def test_a_sample_count_rank_0_shows_is_noted(tmp_path: Path) -> None:
    # Trials printed "seen 169" where the original printed 337, with no note on the line.
    _, report, _ = migrate_script(tmp_path, ANNEALED.replace("WEIGHT", "beta = min(1.0, epoch / 2)"))
    assert "runtime.print0 shows seen, a count of rank 0's samples only" in report, report
