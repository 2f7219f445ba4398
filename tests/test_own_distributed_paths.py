"""Programs that already have a distributed path of their own (a trial of legacy and half-DDP scripts).

- A rank test in a helper of another module (``dist_helpers.is_master(cfg)``, ``cfg.distributed_rank`` set by
  that module's ``distributed_init``) guards a save: it was read with the entry's facts, the save counted as
  every rank's and became ``runtime.save``, whose barrier rank 0 alone then reached (a crash, a hang on NCCL).
- A decision on a value all-reduced in place (``dist.all_reduce(stats)``, then ``stats[0] / stats[1]``) is the
  same on every rank: DDP033 reported the barrier under it as an error (DDP041 already took it as common).
- A switch the program turns on together with its own process group setup (mmcv's ``--launcher``): DDP011 forced
  the switch on under torchrun, but not the setup, so a plain torchrun launch crashed on DDP without a group.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from launch import run_python, run_torchrun
from migrated import migrate_script

from ddp_migrate.cli import cli

DIST_HELPERS = '''
import torch.distributed as dist


def is_master(cfg):
    return cfg.distributed_rank == 0


def should_save(cfg):
    return cfg.epochs > 1


def distributed_init(cfg):
    dist.init_process_group("gloo")
    cfg.distributed_rank = dist.get_rank()
'''

TRAIN_WITH_HELPERS = '''
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import dist_helpers


def main(cfg):
    ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds, shuffle=False))
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(cfg.epochs):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    if dist_helpers.GUARD(cfg):
        torch.save(model.module.state_dict(), "final.pt")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--distributed-rank", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    cfg = parser.parse_args()
    dist_helpers.distributed_init(cfg)
    main(cfg)
    dist.barrier()
    dist.destroy_process_group()
'''


def _migrate_program(folder: Path, guard: str) -> tuple[str, str]:
    (folder / "dist_helpers.py").write_text(DIST_HELPERS)
    (folder / "train.py").write_text(TRAIN_WITH_HELPERS.replace("GUARD", guard))
    result = CliRunner().invoke(cli, [str(folder / "train.py")], catch_exceptions=False)
    return (folder / "train.py").read_text(), result.output


def test_a_rank_test_in_a_helper_of_another_module_guards_the_save(tmp_path: Path) -> None:
    migrated, report = _migrate_program(tmp_path, "is_master")
    assert "runtime.save" not in migrated, report
    assert '        torch.save(model.module.state_dict(), "final.pt")' in migrated, migrated


def test_a_helper_of_another_module_that_tests_no_rank_guards_nothing(tmp_path: Path) -> None:
    migrated, report = _migrate_program(tmp_path, "should_save")
    assert 'runtime.save(model.module.state_dict(), "final.pt")' in migrated, report


REDUCED_DECISION = '''
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def validate(model):
    with torch.no_grad():
        stats = torch.stack([model(torch.ones(4, 4)).sum(), torch.tensor(4.0)])
    WHERE
    return (stats[0] / stats[1]).item()


def main():
    dist.init_process_group("gloo")
    ds = TensorDataset(torch.randn(16, 4))
    loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds))
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    best = float("inf")
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        for (x,) in loader:
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        val = validate(model)
        if val < best:
            best = val
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "best.pt")
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def _lint(folder: Path, source: str) -> str:
    (folder / "train.py").write_text(source)
    return CliRunner().invoke(cli, ["lint", str(folder / "train.py")], catch_exceptions=False).output


def test_a_decision_on_a_value_all_reduced_in_place_is_common(tmp_path: Path) -> None:
    output = _lint(tmp_path, REDUCED_DECISION.replace("WHERE", "dist.all_reduce(stats)"))
    assert "DDP033" not in output, output


def test_a_value_reassigned_after_its_reduction_is_per_rank_again(tmp_path: Path) -> None:
    where = "dist.all_reduce(stats)\n    stats = stats + dist.get_rank()"
    output = _lint(tmp_path, REDUCED_DECISION.replace("WHERE", where))
    assert "DDP033 dist.barrier() is a collective but runs only on the ranks for which `val < best` is true" in output, output


def test_a_value_reduced_only_on_one_rank_is_not_common(tmp_path: Path) -> None:
    """``dist.reduce(stats, dst=0)`` leaves the total on rank 0 alone."""
    output = _lint(tmp_path, REDUCED_DECISION.replace("WHERE", "dist.reduce(stats, dst=0)"))
    assert "DDP033 dist.barrier() is a collective but runs only where `val < best` is true" in output, output


OWN_LAUNCHER = '''
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--launcher", choices=["none", "pytorch"], default="none")
args = parser.parse_args()
if args.launcher == "none":
    distributed = False
else:
    distributed = True
    dist.init_process_group("gloo")

torch.manual_seed(0)
data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data) if distributed else None)
model = nn.Linear(4, 1)
if distributed:
    model = DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
'''


def test_a_switch_turned_on_with_the_programs_own_group_setup_is_left_to_a_human(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, OWN_LAUNCHER)
    assert code == 1, report
    assert "    distributed = False\n" in migrated and "distributed = False or" not in migrated, migrated
    assert "which the program turns on where it also sets up its process group" in report, report
    assert 'under `if args.launcher == "none":`' in report, report


SPAWN_THROUGH_A_PARAMETER = '''
import os

import torch.distributed as dist
import torch.multiprocessing as mp


def demo(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dist.destroy_process_group()


def run_demo(demo_fn, world_size):
    mp.spawn(demo_fn, args=(world_size,), nprocs=world_size, join=True)


if __name__ == "__main__":
    run_demo(demo, 2)
'''


def test_a_spawned_function_handed_through_a_parameter_is_named_in_the_review(tmp_path: Path) -> None:
    """The tutorial's ``run_demo(demo_fn, world_size)``: the review said the function "is not a function of this
    file", which it is; it comes in through a parameter the migration does not follow."""
    _, report, code = migrate_script(tmp_path, SPAWN_THROUGH_A_PARAMETER)
    assert code == 1, report
    assert "the spawned function comes in through the parameter `demo_fn` of `run_demo()`" in report, report


SAVE_OFF_RANK_0 = '''
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

distributed = SWITCH
if distributed:
    dist.init_process_group("gloo")
ds = TensorDataset(torch.randn(16, 4))
loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds) if distributed else None)
model = nn.Linear(4, 1)
if distributed:
    model = DDP(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loader:
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
if not distributed or dist.get_rank() == 0:
    state = model.module.state_dict() if distributed else model.state_dict()
    torch.save(state, "last.pt")
if distributed:
    dist.destroy_process_group()
'''


def test_a_save_on_rank_0_of_a_job_of_several_processes_is_guarded(tmp_path: Path) -> None:
    """``distributed = WORLD_SIZE > 1``: ``not distributed or rank == 0`` lets rank 0 alone in (one process when
    it is false). DDP007 took the test as one that may differ between ranks, and DDP008 took the other side of
    ``model.module.state_dict() if distributed else model.state_dict()`` for the wrapper (timm's shape)."""
    output = _lint(tmp_path, SAVE_OFF_RANK_0.replace("SWITCH", 'int(os.environ.get("WORLD_SIZE", 1)) > 1'))
    assert "DDP007" not in output and "DDP008" not in output, output


def test_a_switch_a_torchrun_launch_may_leave_off_still_lets_every_rank_in(tmp_path: Path) -> None:
    """``distributed = "--ddp" in sys.argv``: off under a plain torchrun launch, where every process saves."""
    source = SAVE_OFF_RANK_0.replace("SWITCH", '"--ddp" in sys.argv').replace("import os\n", "import os\nimport sys\n")
    output = _lint(tmp_path, source)
    assert "DDP007 torch.save runs on every process that gets here" in output, output


@pytest.mark.parametrize(
    "where",
    [
        "if stats.numel() > 5:\n        dist.all_reduce(stats)",
        "dist.all_reduce(stats, group=dist.new_group([0]))",
        "dist.all_reduce(stats)\n    stats.add_(torch.ones(2))",
    ],
    ids=["on-some-paths", "sub-group", "changed-in-place-after"],
)
def test_a_reduction_that_may_not_hold_at_the_read_is_not_common(tmp_path: Path, where: str) -> None:
    """A review found these taken as common: a reduction under a condition (its save became runtime.save, a
    hang), one over a sub-group, one changed in place afterwards."""
    output = _lint(tmp_path, REDUCED_DECISION.replace("WHERE", where))
    assert "DDP033 dist.barrier() is a collective but runs only" in output, output


def test_a_switch_turned_on_with_a_helpers_group_setup_is_left_to_a_human(tmp_path: Path) -> None:
    """mmcv's real shape: ``else: distributed = True; init_dist(args.launcher)``, the group set up two calls
    down in a helper module (a review found the switch forced on without the group: a crash)."""
    (tmp_path / "dist_utils.py").write_text(
        "import torch.distributed as dist\n\n\ndef _init_pytorch():\n    dist.init_process_group('gloo')\n\n\n"
        "def init_dist(launcher):\n    if launcher == 'pytorch':\n        _init_pytorch()\n"
    )
    source = OWN_LAUNCHER.replace('    dist.init_process_group("gloo")\n', "    dist_utils.init_dist(args.launcher)\n").replace(
        "import argparse\n", "import argparse\n\nimport dist_utils\n", 1
    )
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 1, report
    assert "which the program turns on where it also sets up its process group" in report, report
    assert "distributed = False or" not in migrated, migrated


def test_a_rank_stored_into_a_dicts_item_guards_the_save(tmp_path: Path) -> None:
    """``_STATE["rank"] = dist.get_rank()`` in ``setup()``, ``is_main()`` reading ``_STATE["rank"] == 0``: the item
    was read as the dict literal's 0, so the save under ``is_main()`` became runtime.save (a hang, a review found)."""
    helpers = DIST_HELPERS.replace(
        "def is_master(cfg):\n    return cfg.distributed_rank == 0\n",
        '_STATE = {"rank": 0}\n\n\ndef is_master(cfg):\n    return _STATE["rank"] == 0\n',
    ).replace("    cfg.distributed_rank = dist.get_rank()\n", '    _STATE["rank"] = dist.get_rank()\n')
    (tmp_path / "dist_helpers.py").write_text(helpers)
    (tmp_path / "train.py").write_text(TRAIN_WITH_HELPERS.replace("GUARD", "is_master"))
    CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    assert "runtime.save" not in (tmp_path / "train.py").read_text()


UNCALLED_HELPER = '''
import os

import torch.distributed as dist


def init_distributed_mode(args):
    if "RANK" not in os.environ:
        args.distributed = False
        return
    args.distributed = True
    dist.init_process_group(backend="gloo")
'''

TRAIN_WITHOUT_THE_HELPER = '''
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import dist_utils


def main(args):
    ds = TensorDataset(torch.randn(32, 3), torch.randn(32, 1))
    sampler = DistributedSampler(ds, shuffle=False) if args.distributed else None
    loader = DataLoader(ds, batch_size=4, sampler=sampler)
    model = nn.Linear(3, 1)
    if args.distributed:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--distributed", action="store_true")
    args = parser.parse_args()
    CALL
    main(args)
'''


@pytest.mark.parametrize(("call", "set_up"), [("pass", True), ("dist_utils.init_distributed_mode(args)", False)], ids=["never called", "called"])
def test_a_group_setup_no_one_calls_does_not_set_the_group_up(tmp_path: Path, call: str, set_up: bool) -> None:
    """A helper module's ``init_distributed_mode`` that the entry imports but never calls made the program
    count as one that sets up its group: no ``runtime.setup()`` was added, the switch was turned on, and a
    torchrun launch crashed (default process group not initialized), with no review item (a trial)."""
    (tmp_path / "dist_utils.py").write_text(UNCALLED_HELPER)
    (tmp_path / "train.py").write_text(TRAIN_WITHOUT_THE_HELPER.replace("CALL", call))
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    migrated = (tmp_path / "train.py").read_text()
    assert ("runtime.setup(" in migrated) == set_up, result.output + migrated


CONDITIONAL_SETUP = '''
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
SETUP_IMPORT


def main():
    SETUP_CALL
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    print("trained", dist.is_initialized(), flush=True)


if __name__ == "__main__":
    main()
'''

SETUP_HELPER = '''
import os

import torch.distributed as dist


def init_distributed():
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("gloo")
'''


@pytest.mark.parametrize("in_helper", [False, True], ids=["in_the_entry", "in_a_helper_module"])
def test_a_setup_only_when_launched_gets_a_world_of_one_for_the_wrap(tmp_path: Path, in_helper: bool) -> None:
    """A trial's crash with "0 item(s) need a human": ``if "WORLD_SIZE" in os.environ: init_process_group()``
    and no wrap of its own; DDP011 wrapped the model on every path, so a plain ``python train.py`` failed ("Default
    process group has not been initialized"). ``runtime.setup()`` now follows the program's set-up."""
    if in_helper:
        source = CONDITIONAL_SETUP.replace("SETUP_IMPORT", "from dist_utils import init_distributed").replace("SETUP_CALL", "init_distributed()")
        (tmp_path / "dist_utils.py").write_text(SETUP_HELPER)
    else:
        source = CONDITIONAL_SETUP.replace("SETUP_IMPORT", "").replace(
            "SETUP_CALL", 'if "WORLD_SIZE" in os.environ:\n        dist.init_process_group("gloo")'
        )
    migrated, report, code = migrate_script(tmp_path, source)
    assert "DistributedDataParallel(model" in migrated and code == 0, report
    setup = "init_distributed()\n" if in_helper else 'dist.init_process_group("gloo")\n'
    assert migrated.index(setup) < migrated.index("runtime.setup(") < migrated.index("DistributedDataParallel(model"), migrated
    assert "trained True" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
    assert run_torchrun(tmp_path / "train.py", cwd=tmp_path, timeout=120).output.count("trained True") == 1
