"""Devices written as strings (a trial of unseen programs).

- A CUDA device kept as a string at the module's top level and copied into the function that trains
  (``DEVICE = "cuda:0" if ... else "cpu"``; ``device = DEVICE``), or kept in a config dict (``CFG["device"]``),
  was neither rewritten nor reported: on a GPU node every rank would have put its model on GPU 0.
- ``f"cuda:{rank}"`` (and ``"cuda:%d" % rank``, ``"cuda:{}".format(rank)``) outside a device call became a
  ``torch.device``, which code that reads it as a string cannot use (``name.split(":")``, a ``map_location``
  dict's value); the ``%`` and ``.format`` forms were left on the global rank.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from launch import run_torchrun
from migrated import migrate_script

TRAIN = '''
import torch
import torch.nn as nn

CHOICE


def main():
    device = USE
    model = nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4).to(device)).sum().backward()
        opt.step()


if __name__ == "__main__":
    main()
'''

MODULE_LEVEL = {
    "copied": ('DEVICE = "cuda:0" if torch.cuda.is_available() else "cpu"', "DEVICE",
               'DEVICE = str(runtime.device()) if torch.cuda.is_available() else "cpu"'),
    "chosen where copied": ('DEVICE = "cuda:0"', 'DEVICE if torch.cuda.is_available() else "cpu"',
                            "DEVICE = str(runtime.device())"),
    "config dict": ('CFG = {"device": "cuda:0" if torch.cuda.is_available() else "cpu"}', 'CFG["device"]',
                    'CFG = {"device": str(runtime.device()) if torch.cuda.is_available() else "cpu"}'),
}


@pytest.mark.parametrize("shape", list(MODULE_LEVEL))
def test_a_device_string_of_the_top_level_copied_into_the_training_is_this_processs(tmp_path: Path, shape: str) -> None:
    choice, use, expected = MODULE_LEVEL[shape]
    migrated, report, _ = migrate_script(tmp_path, TRAIN.replace("CHOICE", choice).replace("USE", use))
    assert expected + "\n" in migrated, report + migrated
    assert "DDP004" in report, report


def test_a_device_kept_in_a_dict_stays_a_string(tmp_path: Path) -> None:
    """A review: the dict's item became ``runtime.device()``, and ``"cuda" in CFG["device"]`` failed on it."""
    source = TRAIN.replace("CHOICE", 'CFG = {"device": "cuda:0"}').replace("USE", 'CFG["device"]')
    source = source.replace("    model = nn.Linear", '    use_amp = "cuda" in device\n    model = nn.Linear')
    migrated, report, _ = migrate_script(tmp_path, source)
    assert 'CFG = {"device": str(runtime.device())}\n' in migrated, report + migrated


def test_a_string_that_says_more_than_the_device_is_kept(tmp_path: Path) -> None:
    """A review: ``"cuda:{}-log.txt".format(rank)`` became ``str(runtime.device())``, losing the rest of it."""
    source = SPAWNED.replace('    name = f"cuda:{rank}"\n', '    name = f"cuda:{rank}"\n    logname = "cuda:{}-log.txt".format(rank)\n'
                             '    banner = "cuda:%d, rank %d" % (rank, rank)\n    said = f"cuda:{rank} is starting"\n')
    migrated, report, _ = migrate_script(tmp_path, source)
    for kept in ('logname = "cuda:{}-log.txt".format(rank)', 'banner = "cuda:%d, rank %d" % (rank, rank)', 'said = f"cuda:{rank} is starting"'):
        assert kept in migrated, report + migrated


SPAWNED = '''
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def demo(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    ddp_model = DDP(nn.Linear(4, 2))
    if rank == 0:
        torch.save(ddp_model.state_dict(), "ck.pt")
    dist.barrier()
    map_location = {"cuda:0": f"cuda:{rank}"} if torch.cuda.is_available() else "cpu"
    ddp_model.load_state_dict(torch.load("ck.pt", map_location=map_location))
    name = f"cuda:{rank}"
    other = "cuda:%d" % rank
    third = "cuda:{}".format(rank)
    x = torch.zeros(2).to(f"cuda:{rank}") if torch.cuda.is_available() else None
    print("kind", name.split(":")[0], other.split(":")[0], third.split(":")[0], flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(demo, args=(2,), nprocs=2, join=True)
'''


def test_a_device_string_of_the_rank_stays_a_string(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, SPAWNED)
    assert '{"cuda:0": str(runtime.device())} if torch.cuda.is_available() else "cpu"' in migrated, report + migrated
    for name in ("name", "other", "third"):
        assert f"    {name} = str(runtime.device())\n" in migrated, migrated
    # a device call takes the device itself
    assert "x = torch.zeros(2).to(runtime.device()) if torch.cuda.is_available() else None" in migrated, migrated


@pytest.mark.distributed
def test_a_device_string_of_the_rank_is_read_as_a_string_under_torchrun(tmp_path: Path) -> None:
    """The string's readers run (they failed: 'torch.device' object has no attribute 'split')."""
    pytest.importorskip("torch")
    migrate_script(tmp_path, SPAWNED)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.output.count("kind ") == 2, launch.output


OPTION = '''
import argparse

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument(OPTION)
    args = parser.parse_args()
    device = USE
    model = nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for x in torch.randn(8, 2, 4):
        opt.zero_grad()
        model(x.to(device)).sum().backward()
        opt.step()


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    "option, use",
    [
        ('"--device", default="cuda:1"', 'torch.device(args.device if torch.cuda.is_available() else "cpu")'),
        ('"--gpu-device", type=str, default="cuda:0"', "torch.device(args.gpu_device)"),
        ('"-d", dest="dev", default="cuda:1"', "args.dev"),
        # A re-trial: the CPU fallback written in the default itself was left as it was (0 items).
        ('"--device", default="cuda:0" if torch.cuda.is_available() else "cpu"', "torch.device(args.device)"),
    ],
    ids=["choice", "dashes", "dest", "conditional-default"],
)
def test_a_device_option_s_indexed_default_is_this_process_s(tmp_path: Path, option: str, use: str) -> None:
    """``--device`` defaulting to ``cuda:1``: every rank took GPU 1 while DDP's ``device_ids`` said its own (a
    trial: nothing reported). The default becomes this process's device, still a string."""
    migrated, report, _ = migrate_script(tmp_path, OPTION.replace("OPTION", option).replace("USE", use))
    assert "default=str(runtime.device())" in migrated, report
    assert "DDP004" in report and '"cuda:' not in migrated, migrated


def test_a_device_option_defaulting_to_cuda_follows_the_process_s_device(tmp_path: Path) -> None:
    """A bare ``"cuda"`` is the current device, which ``runtime.setup()`` sets per process: left alone."""
    source = OPTION.replace("OPTION", '"--device", default="cuda"').replace("USE", "torch.device(args.device)")
    migrated, _, _ = migrate_script(tmp_path, source)
    assert 'parser.add_argument("--device", default="cuda")' in migrated, migrated


def test_a_device_option_read_in_another_module_is_found(tmp_path: Path) -> None:
    """``--device`` parsed in ``main.py``, handed through a config object to the trainer that builds the device."""
    (tmp_path / "trainer.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Trainer:\n    def __init__(self, cfg):\n"
        '        self.device = torch.device(cfg.device if torch.cuda.is_available() else "cpu")\n'
        "        self.model = nn.Linear(4, 1).to(self.device)\n"
        "        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n\n"
        "    def fit(self):\n        for x in torch.randn(8, 2, 4):\n            self.opt.zero_grad()\n"
        "            self.model(x.to(self.device)).sum().backward()\n            self.opt.step()\n"
    )
    (tmp_path / "main.py").write_text(
        "import argparse\n\nfrom trainer import Trainer\n\n\ndef main():\n    parser = argparse.ArgumentParser()\n"
        '    parser.add_argument("--device", default="cuda:1")\n    Trainer(parser.parse_args()).fit()\n\n\n'
        'if __name__ == "__main__":\n    main()\n'
    )
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    result = CliRunner().invoke(cli, [str(tmp_path)], catch_exceptions=False)
    assert 'parser.add_argument("--device", default=str(runtime.device()))' in (tmp_path / "main.py").read_text(), result.output


VISIBLE = '''
import argparse
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", default="0")
args = parser.parse_args()
SET_VISIBLE


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4, shuffle=True):
        opt.zero_grad()
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        opt.step()


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    "line", ['os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu', 'os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0,1")'], ids=["assign", "setdefault"]
)
def test_visible_devices_set_by_the_program_are_left_to_a_human(tmp_path: Path, line: str) -> None:
    """Under torchrun every process must see every GPU of its node: ``CUDA_VISIBLE_DEVICES=0`` set in code made
    the second process ask for a GPU it could not see (a trial: nothing reported)."""
    _, report, _ = migrate_script(tmp_path, VISIBLE.replace("SET_VISIBLE", line))
    assert "review" in report and "DDP004 CUDA_VISIBLE_DEVICES set by the program" in report, report
    guarded = VISIBLE.replace("SET_VISIBLE", f"if int(os.environ.get(\"WORLD_SIZE\", 1)) == 1:\n    {line}")
    (tmp_path / "guarded").mkdir()
    _, report, _ = migrate_script(tmp_path / "guarded", guarded)
    assert "CUDA_VISIBLE_DEVICES" not in report, report


GPU_OPTION = '''
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", type=int, default=None)
args = parser.parse_args()
device = torch.device(CHOICE)
model = nn.Linear(4, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4, device=device)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
'''


@pytest.mark.parametrize(
    "choice, kept",
    [
        ('f"cuda:{args.gpu}" if args.gpu is not None else "cpu"', 'runtime.device() if args.gpu is not None else torch.device("cpu")'),
        ('"cpu" if args.gpu is None else f"cuda:{args.gpu}"', 'torch.device("cpu") if args.gpu is None else runtime.device()'),
    ],
)
def test_a_gpu_option_s_cpu_default_is_kept(tmp_path: Path, choice: str, kept: str) -> None:
    """MoCo's ``--gpu`` (default ``None``: the CPU) chose ``f"cuda:{args.gpu}"`` or ``"cpu"``: the whole choice
    became ``runtime.device()``, and on a GPU machine the run moved to CUDA with ``--gpu`` ignored. The CUDA side
    (an f-string too) becomes this process's device; the CPU side stays."""
    text, report, _ = migrate_script(tmp_path, GPU_OPTION.replace("CHOICE", choice))
    assert f"device = {kept}\n" in text, report + text


@pytest.mark.parametrize(
    ("use", "expected"),
    [
        ('torch.device(cfg.get("device", "cuda" if torch.cuda.is_available() else "cpu"))',
         'torch.device(cfg.get("device", str(runtime.device()) if torch.cuda.is_available() else "cpu"))'),
        ('torch.device(os.environ.get("DEVICE", "cuda"))', 'torch.device(os.environ.get("DEVICE", str(runtime.device())))'),
    ],
    ids=["dict-default", "environment-default"],
)
def test_a_configured_device_keeps_its_value_and_only_its_cuda_default_changes(tmp_path: Path, use: str, expected: str) -> None:
    """A trial: ``torch.device(cfg.get("device", "cuda" if ... else "cpu"))`` became ``runtime.device()``, dropping
    the configured ``"cpu"`` on a machine with GPUs; now only the default is this process's device."""
    source = TRAIN.replace("CHOICE", 'import os\n\ncfg = {"device": "cpu"}').replace("USE", use)
    migrated, report, _ = migrate_script(tmp_path, source)
    assert expected in " ".join(migrated.split()).replace("( ", "(").replace(" )", ")"), migrated
    assert "the configured value is kept" in report and "DDP_MIGRATE_DEVICE=cpu" in report, report
