"""A program that places nothing on an accelerator keeps training on the CPU after migration.

On a GPU machine, its migrated copy used to crash: ``runtime.setup()`` picked nccl and the DDP wrap got
``device_ids=[local_rank]`` for a CPU model ("device_ids ... only work with ... GPU modules"; with two
processes on a one-GPU machine, "LOCAL_RANK=1 but only 1 CUDA device(s)"), while the report said nothing
needed a human. The set-up is now ``runtime.setup(device="cpu")`` wherever the program is certain to train on
the CPU, and stays ``runtime.setup()`` at any sign of an accelerator or of a device read from outside.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from launch import run_torchrun
from migrated import migrate_script

TRAINING = """
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""

HEAD = """
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
"""


def program(body: str) -> str:
    """A module-level training program: the common head, ``body`` (which builds ``model`` and ``opt``), the
    training loop."""
    return HEAD + body + TRAINING


ON_THE_CPU = {
    "no device code": "model = nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
    "a device variable that is the CPU": (
        'device = torch.device("cpu")\nmodel = nn.Linear(4, 1).to(device)\n'
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a CPU string passed through a parameter": (
        'def build(device="cpu"):\n    return nn.Linear(4, 1).to(device)\n\n'
        'model = build("cpu")\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
    ),
    "a dtype move": "model = nn.Linear(4, 1).to(torch.float64).to(torch.float32)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
    # (a trial's likely crash on GPU machines: the program named CUDA but put nothing on it)
    "CUDA seeded and asked about": (
        "torch.manual_seed(0)\ntorch.cuda.manual_seed_all(0)\nif torch.cuda.device_count() > 1:\n"
        '    print("found", torch.cuda.device_count(), "GPUs")\n'
        "model = nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a docstring that speaks of GPUs": (
        'def build():\n    """Runs on a GPU one day."""\n    return nn.Linear(4, 1)\n\n'
        "model = build()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
}

ON_AN_ACCELERATOR = {
    "a cuda choice": (
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
        "model = nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a device option": (
        'parser = argparse.ArgumentParser()\nparser.add_argument("--device", default="cpu")\n'
        "args = parser.parse_args()\nmodel = nn.Linear(4, 1).to(args.device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a device from a config dict": (
        'import json\ncfg = json.load(open("cfg.json"))\nmodel = nn.Linear(4, 1).to(cfg["device"])\n'
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a device under another name": (
        "def build(dev):\n    return nn.Linear(4, 1).to(dev)\n\n"
        'model = build(torch.get_default_dtype())\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
    ),
    "a device read from a tensor": (
        "model = nn.Linear(4, 1)\nbias = torch.zeros(1, device=model.weight.device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a device from an unpacking": (
        "def pick():\n    return torch.device(0), 1\n\n"
        "device, count = pick()\nmodel = nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a device field of a config class": (
        "from dataclasses import dataclass\n\n@dataclass\nclass Config:\n    device: str = 'cpu'\n\n"
        "cfg = Config()\nmodel = nn.Linear(4, 1).to(cfg.device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "an Apple GPU": 'model = nn.Linear(4, 1).to("mps")\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n',
    "a DataParallel wrap on a count of GPUs": (
        "model = nn.Linear(4, 1)\nif torch.cuda.device_count() > 1:\n    model = nn.DataParallel(model)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    # (words passed over only where all the code is read: a library's helper may place the model)
    "CUDA seeded beside a helper of an unknown library": (
        "from labkit.hw import place\ntorch.cuda.manual_seed_all(0)\nmodel = place(nn.Linear(4, 1))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "GPUs printed beside a default tensor type": (
        'print("on the GPU")\ntorch.set_default_tensor_type("torch.cuda.FloatTensor")\nmodel = nn.Linear(4, 1)\n'
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a device string also printed": (
        'device = "cuda:0"\nprint("training on cuda:0")\nmodel = nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
    ),
    "a device keyword": "model = nn.Linear(4, 1, device=0)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
    "a device map": (
        "def load(name, **kw):\n    return nn.Linear(4, 1)\n\n"
        'model = load("tiny", device_map="auto")\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
    ),
    "a device parameter given an unknown value": (
        "import library\n\ndef build(device):\n    return nn.Linear(4, 1).to(device)\n\n"
        "model = build(library.default())\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a device name imported": (
        "from helpers import device\n\ndef evaluate(net, device):\n    return net\n\n"
        "model = nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a star import of a module outside the program": (
        "from helpers import *\n\ndef evaluate(net, device):\n    return net\n\n"
        "model = nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ),
    "a whole model loaded": (
        'model = torch.load("model.pt", weights_only=False)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
    ),
    "a scripted model loaded": 'model = torch.jit.load("model.pt")\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n',
    "a method fetched by a computed name": (
        'model = getattr(nn.Linear(4, 1), "c" + "uda")()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
    ),
}


@pytest.mark.parametrize("name", sorted(ON_THE_CPU))
def test_a_program_on_the_cpu_is_set_up_on_the_cpu(tmp_path: Path, name: str) -> None:
    migrated, report, code = migrate_script(tmp_path, program(ON_THE_CPU[name]))
    assert code == 0, report
    assert 'runtime.setup(device="cpu")' in migrated, migrated
    assert 'device="cpu" keeps every process on the CPU' in report, report


@pytest.mark.parametrize("name", sorted(ON_AN_ACCELERATOR))
def test_any_sign_of_an_accelerator_keeps_the_machines_device(tmp_path: Path, name: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, program(ON_AN_ACCELERATOR[name]))
    assert "runtime.setup()" in migrated, migrated
    assert 'device="cpu"' not in migrated and "keeps every process on the CPU" not in report, report


def test_a_module_of_the_program_that_moves_to_the_gpu_counts(tmp_path: Path) -> None:
    (tmp_path / "nets.py").write_text("import torch.nn as nn\n\n\ndef build():\n    return nn.Linear(4, 1).cuda()\n")
    body = "from nets import build\nmodel = build()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    migrated, report, _ = migrate_script(tmp_path, program(body))
    assert "runtime.setup()" in migrated and 'device="cpu"' not in migrated, report + migrated


def test_a_helper_modules_set_up_keeps_the_machines_device(tmp_path: Path) -> None:
    """Another script may import the helper and train on a GPU: only the entry says where to train."""
    (tmp_path / "dist_utils.py").write_text(
        "import torch.distributed as dist\n\n\ndef setup(rank, world_size):\n"
        '    dist.init_process_group("gloo", rank=rank, world_size=world_size)\n'
    )
    body = (
        "import torch.multiprocessing as mp\nfrom dist_utils import setup\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
        "def main(rank, world_size):\n    setup(rank, world_size)\n    model = DDP(nn.Linear(4, 1))\n"
        "    model(torch.randn(8, 4)).sum().backward()\n\n\n"
        'if __name__ == "__main__":\n    mp.spawn(main, args=(2,), nprocs=2)\n'
    )
    _, report, _ = migrate_script(tmp_path, HEAD + body)
    helper = (tmp_path / "dist_utils.py").read_text()
    assert 'runtime.setup("gloo")' in helper, report + helper


def test_a_cpu_programs_loads_map_onto_the_cpu(tmp_path: Path) -> None:
    """A load before the set-up (a module-level statistic) would otherwise map onto the GPU of a GPU machine."""
    body = (
        'MEAN = torch.load("mean.pt")\nmodel = nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
    )
    migrated, report, _ = migrate_script(tmp_path, program(body))
    assert 'MEAN = torch.load("mean.pt", map_location="cpu")' in migrated, migrated
    assert "maps onto the CPU, where the program trains" in report, report


def test_a_second_migration_of_a_cpu_program_changes_nothing(tmp_path: Path) -> None:
    """Once migrated, the program reads runtime.device_ids(): its set-up's device="cpu" still decides."""
    migrated, _, _ = migrate_script(tmp_path, program(ON_THE_CPU["no device code"] + 'torch.load("x.pt")\n'))
    again, report, _ = migrate_script(tmp_path, migrated)
    assert again == migrated and "1 unchanged" in report, report
    assert 'torch.load("x.pt", map_location="cpu")' in migrated, migrated


@pytest.mark.parametrize(
    ("choice", "told"),
    [
        ('torch.device("cuda" if use_cuda else "cpu")', True),
        ('torch.device("cpu" if args.no_cuda else "cuda")', True),
        ('torch.device("cuda" if use_cuda else "mps")', False),
    ],
    ids=["cpu-otherwise", "cpu-first", "another-accelerator"],
)
def test_a_users_cpu_choice_is_kept_and_the_report_says_how_to_launch_it(tmp_path: Path, choice: str, told: bool) -> None:
    """A trial's likely crash on a GPU machine: ``--no-cuda`` keeps the model on the CPU while the set-up
    binds this process's GPU (nccl, device_ids=[local_rank]). The choice is the user's and stays; the report
    says to launch such a run with DDP_MIGRATE_DEVICE=cpu."""
    body = (
        "parser = argparse.ArgumentParser()\nparser.add_argument('--no-cuda', action='store_true')\n"
        "args = parser.parse_args()\nuse_cuda = not args.no_cuda and torch.cuda.is_available()\n"
        f"device = {choice}\nmodel = nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    migrated, report, code = migrate_script(tmp_path, program(body))
    assert "runtime.device() if" in migrated or "else runtime.device()" in migrated, migrated
    assert ("launch with DDP_MIGRATE_DEVICE=cpu" in report) is told, report
    # The wrap asks where the model is (the --no-cuda option alone says the user may pick).
    assert "DistributedDataParallel(model, device_ids=runtime.device_ids(model))" in migrated, migrated


@pytest.mark.parametrize(
    ("lines", "follows"),
    [
        ("parser = argparse.ArgumentParser()\nparser.add_argument('--device', default='cuda')\nargs = parser.parse_args()\n"
         "device = torch.device(args.device)\n", True),
        ('device = torch.device("cuda:0")\nstats = torch.load("stats.pt", map_location="cpu")\n', False),
    ],
    ids=["device-option", "only-a-load-mapped-to-the-cpu"],
)
def test_the_wrap_follows_the_model_where_the_user_may_pick_the_cpu(tmp_path: Path, lines: str, follows: bool) -> None:
    """``--device cpu`` on a GPU machine leaves the model on the CPU while this process's GPU is bound: the wrap
    asks the model (``device_ids(model)``: None on the CPU). A load mapped onto the CPU offers no such choice."""
    body = lines + "model = nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    migrated, report, _ = migrate_script(tmp_path, program(body))
    wrap = "DistributedDataParallel(model, device_ids=runtime.device_ids({}))".format("model" if follows else "")
    assert wrap in migrated, migrated


NO_CUDA_PROGRAM = """
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cuda", action="store_true")
    args = parser.parse_args()
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    print(f"trained on {next(model.parameters()).device}")


if __name__ == "__main__":
    main()
"""


@pytest.mark.distributed
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the crash was a GPU machine's (tests/gpu_check.sh runs it)")
def test_a_users_cpu_choice_trains_on_a_gpu_machine(tmp_path: Path) -> None:
    """``--no-cuda`` on a GPU machine: the migrated program used to crash its wrap (device_ids=[local_rank] for
    a CPU model, then nccl refusing CPU gradients). Now the model stays on the CPU, the wrap takes no device
    ids and gloo carries the gradients beside nccl; without the option it trains on the GPU. One process per
    GPU, at most two."""
    migrated, _, _ = migrate_script(tmp_path, NO_CUDA_PROGRAM)
    assert "device_ids=runtime.device_ids(model)" in migrated, migrated
    nproc = min(2, torch.cuda.device_count())
    on_cpu = run_torchrun(tmp_path / "train.py", "--no-cuda", nproc_per_node=nproc, cwd=tmp_path, timeout=180)
    on_gpu = run_torchrun(tmp_path / "train.py", nproc_per_node=nproc, cwd=tmp_path, timeout=180)
    assert "trained on cpu" in on_cpu.output, on_cpu.tail()
    assert "trained on cuda:0" in on_gpu.output, on_gpu.tail()


def test_a_program_that_loads_its_data_whole_still_trains_on_the_cpu(tmp_path: Path) -> None:
    # (a trial on pytorch/examples' time_sequence_prediction: ``torch.load("traindata.pt", weights_only=False)`` of
    # its data made the program "may use a GPU", and a GPU machine's device ids crashed the wrap of its CPU model)
    source = (
        "import torch\nimport torch.nn as nn\n\nif __name__ == '__main__':\n"
        "    data = torch.load('traindata.pt', weights_only=False)\n    seq = nn.Linear(4, 4)\n"
        "    optimizer = torch.optim.SGD(seq.parameters(), lr=0.1)\n    for i in range(3):\n"
        "        optimizer.zero_grad()\n        seq(data).sum().backward()\n        optimizer.step()\n"
    )
    text, report, _ = migrate_script(tmp_path, source)
    assert 'runtime.setup(device="cpu")' in text and 'map_location="cpu"' in text, text
    model_loaded = source.replace("data = torch.load", "seq_loaded = torch.load").replace("seq(data)", "seq_loaded.eval() or seq(torch.randn(2, 4))")
    text, report, _ = migrate_script(tmp_path, model_loaded)
    assert 'runtime.setup(device="cpu")' not in text, text
