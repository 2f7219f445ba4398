"""One epoch function for training and validation, told which by a flag: ``run_epoch(model, loader, opt, train)``.

A trial's silent wrong migration: ``run_epoch(..., True)`` for the training loader and ``run_epoch(..., False)``
for the validation loader made both "training loaders" (the loop calls ``backward()`` under ``if train:``), so the
validation loader was sharded and the printed validation loss was rank 0's half of the set (0.1909 on rank 0,
0.1161 on rank 1, 0.1535 over the whole set), with nothing to review. What each call site passes (a literal
``True``/``False``, a mode string, ``None`` for a missing optimizer) now decides, for the tests around the
``backward()``: ``if train:``, ``if mode == "train":``, ``if not evaluating:``, a flag computed from a parameter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_torchrun
from migrated import migrate_script, printed_on_every_rank

PROGRAM = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def run_epoch(model, loader, opt, {signature}):
{derive}    total, n = 0.0, 0
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        if {test}:
            opt.zero_grad()
            loss.backward()
            opt.step()
        total += loss.item() * len(y)
        n += len(y)
    return total / n, n


def main():
    torch.manual_seed(0)
    train_loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=16)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        run_epoch(model, train_loader, opt, {training})
        with torch.no_grad():
            loss, n = run_epoch(model, val_loader, opt, {evaluating})
        print(f"epoch {epoch} val {loss:.6f} over {n}", flush=True)


if __name__ == "__main__":
    main()
'''

#: (id, signature, lines computing a flag, the test around backward(), the training call's argument, the validation one's)
SHAPES = [
    ("bool", "train=True", "", "train", "True", "False"),
    ("keyword", "train=True", "", "train", "train=True", "train=False"),
    ("default", "train=True", "", "train", "", "train=False"),
    ("mode", 'mode="train"', "", 'mode == "train"', '"train"', '"val"'),
    ("negated", "evaluating=False", "", "not evaluating", "evaluating=False", "evaluating=True"),
    ("derived", "phase", '    training = phase in ("train", "finetune")\n', "training", '"finetune"', '"test"'),
]


def program(signature: str, derive: str, test: str, training: str, evaluating: str) -> str:
    source = PROGRAM.replace("{signature}", signature).replace("{derive}", derive).replace("{test}", test)
    source = source.replace("{training}", training).replace("{evaluating}", evaluating)
    return source.replace("opt, )", "opt)")


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_the_loader_passed_where_the_flag_says_evaluate_stays_whole(tmp_path: Path, shape: tuple[str, ...]) -> None:
    migrated, report, code = migrate_script(tmp_path, program(*shape[1:]))
    train_call = migrated.split("train_loader = DataLoader(")[1].split("val_loader")[0]
    val_call = migrated.split("val_loader = DataLoader(")[1].split("\n    model")[0]
    assert "DistributedSampler(" in train_call and "DistributedSampler" not in val_call, migrated
    assert "val_loader.sampler.set_epoch" not in migrated, migrated
    assert code == 0, report


def test_a_flag_the_call_site_computes_is_left_to_a_human(tmp_path: Path) -> None:
    """``run_epoch(..., train=is_train)``: which loader trains cannot be read, so neither is taken for sure."""
    source = program("train=True", "", "train", "True", "train=epoch < 0")
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DistributedSampler" not in migrated.split("val_loader = DataLoader(")[1].split("\n    model")[0], migrated
    assert "DDP005 DataLoader iterated by a loop that trains only for some callers: cannot tell" in report, report


def test_every_rank_reports_the_whole_validation_set_under_torchrun(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, program(*SHAPES[0][1:]))
    (tmp_path / "train.py").write_text(printed_on_every_rank(migrated))
    output = run_torchrun(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
    lines = sorted(line for line in output.splitlines() if line.startswith("epoch 1 val"))
    assert len(lines) == 2 and lines[0] == lines[1] and lines[0].endswith("over 32"), output


#: Shapes where the loop trains for every caller, or where a call site's value cannot be read (a review's
#: regressions of the first version: each left the training loader unsharded or sent it to a human).
AMP_BRANCHES = PROGRAM.replace("{signature}", "use_amp=False").replace("{derive}", "").replace(
    "        if {test}:\n            opt.zero_grad()\n            loss.backward()\n            opt.step()\n",
    "        opt.zero_grad()\n        if use_amp:\n            loss.mul(2.0).backward()\n        else:\n            loss.backward()\n"
    "        opt.step()\n",
).replace("{training}", "").replace("{evaluating}", "").replace("opt, )", "opt)")
NOT_A_FLAG = PROGRAM.replace("{signature}", "args").replace("{derive}", "").replace("{test}", "torch.isfinite(loss) and args.clip >= 0")
NOT_A_FLAG = NOT_A_FLAG.replace("{training}", "ARGS").replace("{evaluating}", "ARGS").replace(
    "\n\ndef main():", "\n\nclass ARGS:\n    clip = 1.0\n\n\ndef main():"
)


@pytest.mark.parametrize("source", [AMP_BRANCHES, NOT_A_FLAG], ids=["backward-in-both-branches", "tests-of-no-flag"])
def test_a_loop_that_trains_whatever_the_flags_say_shards_its_loaders(tmp_path: Path, source: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DistributedSampler(" in migrated.split("train_loader = DataLoader(")[1].split("val_loader")[0], migrated
    assert "cannot tell whether it trains" not in report, report


def test_a_flag_given_through_keyword_unpacking_is_not_read_as_its_default(tmp_path: Path) -> None:
    """``run_epoch(..., **kw)`` with ``kw = {"train": True}``: the default ``False`` would have left the training
    loader whole without a word; it is left to a human."""
    source = program("train=False", "", "train", "**kw", "train=False").replace(
        "    for epoch in range(2):\n", '    kw = {"train": True}\n    for epoch in range(2):\n', 1
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DDP005 DataLoader iterated by a loop that trains only for some callers: cannot tell" in report, report
    assert report.count("treated as an evaluation loader") <= 1, report
