"""Values and files a run reads before anything of that run could have changed them: the resume of a training
program reads a checkpoint before the training loop that saves one.

- DDP041 took ``iter_num = ck["iter_num"]`` of the resume for a per-rank value because the training loop later
  rebinds ``ck`` to a dict built under a test on the loss: every decision on ``iter_num`` (``if iter_num >=
  max_iters: break``) became an error. A name is per-rank at a use only where a statement that made it so may
  run before the use (in its function, up one call at each level, or in a loop around both).
- DDP012 asked for a barrier before the resume's ``torch.load(path)`` because rank 0 alone writes ``path``
  later in the run: no write of this run can come before that read.
Each case keeps its counterpart: the same names read after the per-rank statement, the same file read back
after the training loop, still reported.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import lint_findings

lint = lint_findings


HEAD = """import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
model = DDP(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
"""

RESUMED_COUNTER = HEAD + """iter_num, best = 0, 1e9
if os.path.exists("ck.pt"):
    ck = torch.load("ck.pt", map_location="cpu")
    model.module.load_state_dict(ck["model"])
    iter_num = ck["iter_num"]
while True:
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        iter_num += 1
        if loss.item() < best:
            best = loss.item()
            ck = {"model": model.module.state_dict(), "iter_num": iter_num, "best": best}
            if dist.get_rank() == 0:
                torch.save(ck, "ck.pt")
        if iter_num >= 20:
            break
    if iter_num >= 20:
        break
"""


def test_a_counter_resumed_before_the_loop_is_the_same_on_every_rank(tmp_path: Path) -> None:
    found = lint(tmp_path, RESUMED_COUNTER, "DDP041")
    # The best-loss test decides on this rank's loss (rightly reported); the counter's tests do not.
    assert [line.split(":")[1] for line in found] == ["25"], found


def test_a_counter_read_from_the_per_rank_dict_after_it_is_built_stays_per_rank(tmp_path: Path) -> None:
    source = RESUMED_COUNTER.replace(
        "        if iter_num >= 20:\n            break\n    if iter_num >= 20:",
        "        if ck[\"iter_num\"] >= 20:\n            break\n    if iter_num >= 20:",
    )
    assert 'ck["iter_num"] >= 20' in source
    found = lint(tmp_path, source, "DDP041")
    assert sorted(line.split(":")[1] for line in found) == ["25", "30"], found


def test_a_name_rebound_per_rank_inside_the_loop_is_per_rank_at_the_next_round(tmp_path: Path) -> None:
    # The test reads ``ck`` before the per-rank rebinding in the loop's body: the next round reads that dict.
    source = HEAD + """ck = {"iter_num": 0}
best = 1e9
for epoch in range(5):
    if ck["iter_num"] > 12:
        break
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < best:
            best = loss.item()
            ck = {"iter_num": epoch * 8}
"""
    found = lint(tmp_path, source, "DDP041")
    assert any(":16:" in line for line in found), found


SAVES_LATER = HEAD + """
def resume(path):
    if os.path.exists(path):
        model.module.load_state_dict(torch.load(path, map_location="cpu"))


def save(path):
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), path)


def main():
    resume("last.pt")
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        save("last.pt")
    TAIL


main()
"""


def test_the_resume_read_before_the_loop_that_saves_needs_no_barrier(tmp_path: Path) -> None:
    assert lint(tmp_path, SAVES_LATER.replace("    TAIL\n", ""), "DDP012") == []


def test_the_same_file_read_back_after_the_loop_still_needs_one(tmp_path: Path) -> None:
    source = SAVES_LATER.replace("    TAIL\n", '    model.module.load_state_dict(torch.load("last.pt", map_location="cpu"))\n')
    line = source.splitlines().index('    model.module.load_state_dict(torch.load("last.pt", map_location="cpu"))') + 1
    found = lint(tmp_path, source, "DDP012")
    assert len(found) == 1 and "DDP012" in found[0] and f":{line}:" in found[0], found


def test_a_resume_called_inside_the_loop_that_saves_still_needs_one(tmp_path: Path) -> None:
    source = SAVES_LATER.replace("    TAIL\n", "").replace('    resume("last.pt")\n    for epoch in range(3):\n', '    for epoch in range(3):\n        resume("last.pt")\n')
    found = lint(tmp_path, source, "DDP012")
    assert len(found) == 1 and "DDP012" in found[0], found


BRANCHED_WORKER = '''import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")


def worker(resume, distributed):
    dist.init_process_group("gloo")
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if resume and os.path.isfile(resume):
        checkpoint = torch.load(resume, map_location="cpu")
        model.module.load_state_dict(checkpoint["state_dict"])
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if dist.get_rank() == 0:
            save_checkpoint({"state_dict": model.module.state_dict()}, epoch == 2)
    TAIL


def main():
    if len(sys.argv) > 2:
        worker(sys.argv[1], True)
    else:
        worker(None, False)


main()
'''


def test_a_resume_in_a_worker_called_from_either_branch_needs_no_barrier(tmp_path: Path) -> None:
    """The ImageNet example's resume: ``main_worker`` is called from either branch of ``if distributed`` (its
    ``mp.spawn`` made a call), reads ``args.resume`` before its epoch loop and has rank 0 save after each epoch. The
    read was taken to come after rank 0's writes (the write of one call of the worker before the read of the
    other call): two barrier TODOs for a human, where no write of the run comes first."""
    assert lint(tmp_path, BRANCHED_WORKER.replace("    TAIL\n", ""), "DDP012") == []


def test_a_read_after_the_epoch_loop_of_the_worker_still_needs_one(tmp_path: Path) -> None:
    source = BRANCHED_WORKER.replace("    TAIL\n", '    best = torch.load(os.path.join(".", "model_best.pth.tar"), map_location="cpu")\n')
    found = lint(tmp_path, source, "DDP012")
    assert len(found) == 1 and "DDP012" in found[0], found


@pytest.mark.parametrize(
    "shape",
    [
        'if __name__ == "__main__":\n    [main(seed) for seed in range(3)]\n',  # a run per seed, in a comprehension
        'if __name__ == "__main__":\n    run = lambda: main(0)\n    run()\n    run()\n',  # called through a lambda, twice
    ],
)
def test_a_function_run_again_from_a_comprehension_or_a_lambda_reads_the_last_runs_file(tmp_path: Path, shape: str) -> None:
    """The review of this change: ``main`` called from a comprehension (or a lambda) runs again, and its resume then
    reads the file rank 0 saved in the run before: the barrier is needed."""
    source = SAVES_LATER.replace("    TAIL\n", "").replace("\n\nmain()\n", "\n\n" + shape)
    source = source.replace('def main():\n    resume("last.pt")', 'def main(seed=0):\n    resume("last.pt")')
    found = lint(tmp_path, source, "DDP012")
    assert len(found) == 1 and "DDP012" in found[0], found


STAGED = """import sys
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(nn.Linear(4, 1))


def stage(epoch, path):
    if epoch == 0:
        if rank == 0:
            torch.save(model.module.state_dict(), path)
    else:
        state = torch.load(path, map_location="cpu")
        model.module.load_state_dict(state)


CALLS
dist.destroy_process_group()
"""


@pytest.mark.parametrize(
    ("calls", "reported"),
    [("for epoch in range(2):\n    stage(epoch, sys.argv[1])", True), ("stage(0, sys.argv[1])", False)],
    ids=["called-in-a-loop", "called-once"],
)
def test_a_write_and_a_read_on_exclusive_branches_of_a_function_run_again_are_ordered(tmp_path: Path, calls: str, reported: bool) -> None:
    """A review's case: the save on the first pass of ``stage`` and the read on the next sit on exclusive branches of
    one ``if``, but the function runs on every pass of a loop: the read comes after rank 0's write, without a barrier
    (rank 1 failed with FileNotFoundError). The branches exclude each other only within one call."""
    lines = lint_findings(tmp_path, STAGED.replace("CALLS", calls), "DDP012")
    assert any("every rank reads a file after rank 0 alone wrote" in line for line in lines) is reported, lines
