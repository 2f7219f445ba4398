"""``nn.DataParallel`` in the shapes real scripts write it, each of which the migration once wrapped twice
(``DistributedDataParallel(DistributedDataParallel(model))``: ``model.module`` was a wrapper, checkpoints
kept ``module.`` keys the original's loader rejected), with exit 0:

- both branches of ``if device_count() > 1: DP(model, device_ids=...) else: DP(model)``;
- ``if n_gpu > 1: model = DP(model)`` followed by ``if args.local_rank != -1: model = DDP(model)`` (the
  shape of the Hugging Face example scripts): the DataParallel is the non-distributed path and stays;
- a factory that returns ``DataParallel(net)``, whose result the optimizer trains.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_python, run_torchrun
from migrated import migrate_script, saved_states, train_original_and_migrated

BOTH_BRANCHES = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
model = nn.Linear(4, 1)
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model, device_ids=list(range(torch.cuda.device_count())))
else:
    model = nn.DataParallel(model)
optimizer = torch.optim.SGD([model.module.weight, model.module.bias], lr=0.1)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
torch.save(model.module.state_dict(), "final.pt")
'''

LAUNCH_SWITCH = '''
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
if args.local_rank != -1:
    torch.distributed.init_process_group(backend="gloo")
n_gpu = torch.cuda.device_count()

torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = RandomSampler(data) if args.local_rank == -1 else DistributedSampler(data)
loader = DataLoader(data, sampler=sampler, batch_size=8)
model = nn.Linear(4, 1)
if n_gpu > 1:
    model = torch.nn.DataParallel(model)
if args.local_rank != -1:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    if args.local_rank != -1:
        sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
if args.local_rank in [-1, 0]:
    model_to_save = model.module if hasattr(model, "module") else model
    torch.save(model_to_save.state_dict(), "final.pt")
'''

# The same switch in a helper the model is handed to after a move (a trial's BERT-era script): the move made
# DDP002 write the script's own wrap as ``DistributedDataParallel(model.to(runtime.device()))``, which DDP001 no
# longer took for a wrap of the same model, so the DataParallel became a second DDP wrap (``module.`` keys under
# torchrun, no process group as plain python).
LAUNCH_SWITCH_IN_A_HELPER = '''
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def train(args, model):
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data, shuffle=False) if args.local_rank != -1 else None
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if args.n_gpu > 1:
        model = torch.nn.DataParallel(model)
    if args.local_rank != -1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    if args.local_rank != -1:
        torch.distributed.init_process_group(backend="gloo")
    args.n_gpu = torch.cuda.device_count()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    model.to("cpu")
    model = train(args, model)
    if args.local_rank in [-1, 0]:
        to_save = model.module if hasattr(model, "module") else model
        torch.save(to_save.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''

FACTORY = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def build_model():
    return nn.DataParallel(nn.Linear(4, 1))


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    torch.save(model.module.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''


def _wraps(text: str) -> int:
    return text.count("DistributedDataParallel(")


def test_dataparallel_in_every_branch_becomes_one_wrap_after_the_condition(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, BOTH_BRANCHES)
    assert code == 0, report
    assert _wraps(migrated) == 1 and "device_count() > 1" not in migrated, migrated
    assert "\nmodel = DistributedDataParallel(model, device_ids=runtime.device_ids())\n" in migrated, migrated


@pytest.mark.parametrize("source", [LAUNCH_SWITCH, LAUNCH_SWITCH_IN_A_HELPER], ids=["module", "helper-after-a-move"])
def test_dataparallel_before_the_scripts_own_ddp_wrap_is_its_single_process_path(tmp_path: Path, source: str) -> None:
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "model = torch.nn.DataParallel(model)" in migrated and _wraps(migrated) == 1, migrated
    assert "nn.DataParallel kept in the script's non-distributed branch" in report


def test_a_model_a_factory_wraps_is_not_wrapped_again(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, FACTORY)
    assert code == 0, report
    assert _wraps(migrated) == 1 and "DDP011" not in report, migrated


@pytest.mark.distributed
@pytest.mark.parametrize(
    "source",
    [BOTH_BRANCHES, LAUNCH_SWITCH, LAUNCH_SWITCH_IN_A_HELPER, FACTORY],
    ids=["branches", "launch-switch", "launch-switch-helper", "factory"],
)
def test_each_shape_trains_the_original_weights_under_torchrun_and_alone(tmp_path: Path, source: str) -> None:
    """The plain keys and the weights of the original (one process, batches of 16 or 8), under torchrun with
    2 processes and as plain ``python``."""
    torch = pytest.importorskip("torch")
    expected, runs = saved_states(tmp_path, source)
    for actual in runs:
        assert sorted(actual) == ["bias", "weight"], sorted(actual)
        # The launch switches keep their own distributed path: their own sampler (which shuffles in one) and a
        # batch per process, as the original's own distributed runs had.
        if source not in (LAUNCH_SWITCH, LAUNCH_SWITCH_IN_A_HELPER):
            for key in expected:
                torch.testing.assert_close(actual[key], expected[key], atol=1e-6, rtol=0)


TWO_MODELS = 'import argparse\n\nimport torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef main():\n    parser = argparse.ArgumentParser()\n    parser.add_argument("--arch", default="wide")\n    args = parser.parse_args()\n    torch.manual_seed(0)\n    if args.arch == "wide":\n        model = nn.DataParallel(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1)))\n    else:\n        model = nn.DataParallel(nn.Linear(4, 1))\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)\n    for epoch in range(2):\n        for x, y in loader:\n            opt.zero_grad()\n            nn.functional.mse_loss(model(x), y).backward()\n            opt.step()\n    print(args.arch, sum(p.numel() for p in model.parameters()))\n\n\nif __name__ == "__main__":\n    main()\n'


@pytest.mark.parametrize("moved", ["", ".to(device)", ".cuda().float()"], ids=["plain", "moved-to-a-device", "chained-calls"])
def test_branches_that_wrap_different_models_keep_their_models(tmp_path: Path, moved: str) -> None:
    """``if wide: DP(Sequential(...)) else: DP(Linear(...))``: each branch still builds its model, and one
    wrap follows (the chain was replaced by the first branch's wrap: ``--arch`` narrow trained the wide net;
    with ``.to(device)`` chained on each wrap it still was, silently, until this case)."""
    source = TWO_MODELS.replace("        model = nn.DataParallel(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1)))\n", f"        model = nn.DataParallel(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))){moved}\n")
    source = source.replace("        model = nn.DataParallel(nn.Linear(4, 1))\n", f"        model = nn.DataParallel(nn.Linear(4, 1)){moved}\n")
    source = source.replace("    torch.manual_seed(0)\n", '    torch.manual_seed(0)\n    device = torch.device("cuda")\n')
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    moved_now = {"": "", ".to(device)": ".to(device)", ".cuda().float()": ".to(runtime.device()).float()"}[moved]
    flat = "".join(migrated.split())  # (the layout may break a long line)
    assert f"else:model=nn.Linear(4,1){moved_now}model=DistributedDataParallel(model" in flat, migrated
    assert f"model=nn.Sequential(nn.Linear(4,16),nn.ReLU(),nn.Linear(16,1)){moved_now}else:" in flat, migrated
    assert _wraps(migrated) == 1, migrated
    assert "\n    model = DistributedDataParallel(model" in migrated, migrated


LAMBDA = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

cuda = torch.cuda.is_available()
parallel = lambda m: nn.DataParallel(m).cuda() if cuda else m


def main():
    torch.manual_seed(0)
    model = parallel(nn.Linear(4, 1))
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


def test_a_wrap_in_a_lambda_is_left_to_a_human(tmp_path: Path) -> None:
    """``lambda m: DP(m).cuda() if cuda else m``: the lambda became a DDP wrap and DDP011 wrapped its result
    again (a DDP of a DDP on a machine with CUDA); removing the wrap from the lambda instead broke a program that
    only evaluated (no wrap, ``module.`` keys lost) and one that saved the model's keys (a review found both).
    The migration cannot follow the models a lambda wraps: it asks a human."""
    migrated, report, code = migrate_script(tmp_path, LAMBDA)
    assert code == 1, report
    assert "DDP001 nn.DataParallel inside a lambda: the migration cannot follow the models it wraps" in report, report
    assert "parallel = lambda m: nn.DataParallel(" in migrated, migrated


#: A DataParallel model trained by code the program does not hold: a library's loop it hands the model to
#: (here a stand-in module the migration does not read). The migrated wrap needs the process group anyway: a
#: trial's migration wrapped the model in DDP and set up no group, and the program stopped at once, plain python
#: as under torchrun ("Default process group has not been initialized").
TRAINED_ELSEWHERE = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from trainer_lib import fit

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
model = nn.DataParallel(nn.Linear(4, 1))
fit(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
print("weights", round(sum(p.sum().item() for p in model.parameters()), 4))
'''

TRAINER_LIB = """\
def fit(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()
"""


def test_a_model_trained_out_of_sight_gets_the_process_group_its_wrap_needs(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, TRAINED_ELSEWHERE)
    assert "DistributedDataParallel(" in migrated and "runtime.setup(" in migrated, report
    pytest.importorskip("torch")
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "trainer_lib.py").write_text(TRAINER_LIB)  # (beside the program only now: the migration did not see it)
    result = run_python(tmp_path / "train.py", cwd=tmp_path, env={"OMP_NUM_THREADS": "1", "PYTHONPATH": str(lib)}, timeout=120)
    assert "weights" in result.stdout, result.stdout + result.stderr


#: A DataParallel model built in place, whose classifier is replaced after the wrap (fine-tuning a
#: "pretrained" backbone): DataParallel replicates the module at every forward and used the new head; DDP
#: registers the parameters once. A trial's migration kept the replacement after the DDP wrap: both runs stopped
#: at step 2 ("Expected to have finished reduction"), 0 items.
HEAD_REPLACED = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.fc = nn.Linear(16, 50)

    def forward(self, x):
        return self.fc(self.body(x))


torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.DataParallel(Backbone()).to(device)
model.module.fc = nn.Linear(16, 3).to(device)
loader = DataLoader(TensorDataset(torch.randn(64, 6), torch.randint(0, 3, (64,))), batch_size=16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
print("checksum", round(sum(p.sum().item() for p in model.parameters()), 4))
'''


@pytest.mark.distributed
def test_a_head_replaced_after_an_in_place_wrap_is_built_before_the_wrap(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    original, migrated, launch = train_original_and_migrated(tmp_path, HEAD_REPLACED)
    text = (migrated / "train.py").read_text()
    assert "model = Backbone()\nmodel.fc = nn.Linear(16, 3).to(device)\nmodel = DistributedDataParallel(" in text, text
    assert launch.output.count("checksum") == 1, launch.output


#: The ImageNet example's device choice: one GPU by --gpu, DataParallel over all of them, or the CPU. The
#: migration converts the DataParallel branch; the --gpu branch still sets the model up alone (a trial: with
#: --gpu 0 under torchrun the ranks trained apart, and the report spoke of the CPU path only).
GPU_OPTION = '''
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", default=None, type=int)
args = parser.parse_args()
model = nn.Linear(4, 1)
if args.gpu is not None:
    model = model.cuda(args.gpu)
elif torch.cuda.is_available():
    model = nn.DataParallel(model).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
'''


def test_a_branch_that_sets_the_model_up_unwrapped_is_left_to_a_human(tmp_path: Path) -> None:
    _, report, code = migrate_script(tmp_path, GPU_OPTION)
    assert code == 1 and "DistributedDataParallel on one branch of an if only: the branch of `args.gpu is not None` sets the model up unwrapped" in report, report
    every_branch = GPU_OPTION.replace("    model = model.cuda(args.gpu)\n", "    model = nn.DataParallel(model, device_ids=[args.gpu]).cuda(args.gpu)\n")
    _, report, _ = migrate_script(tmp_path, every_branch)
    assert "on one branch of an if only" not in report, report


def test_a_wrap_chosen_by_the_launch_is_no_wrap_on_one_branch_only(tmp_path: Path) -> None:
    """A review: ``if args.local_rank != -1: model = DDP(model) else: model = model.to(device)`` (the shape of
    Hugging Face's example scripts): torchrun sets LOCAL_RANK, so the wrap is always taken."""
    source = GPU_OPTION.replace('parser.add_argument("--gpu", default=None, type=int)', 'parser.add_argument("--local_rank", default=-1, type=int)').replace(
        "if args.gpu is not None:\n    model = model.cuda(args.gpu)\nelif torch.cuda.is_available():\n    model = nn.DataParallel(model).cuda()\n",
        "if args.local_rank != -1:\n    model = nn.parallel.DistributedDataParallel(model)\nelse:\n    model = model.to('cpu')\n",
    )
    assert "args.local_rank != -1" in source
    _, report, _ = migrate_script(tmp_path, source)
    assert "on one branch of an if only" not in report, report


IN_MAIN_BLOCK = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8)
    WRAP
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for (x,) in loader:
            loss = model(x.to(device)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(model.state_dict(), "ckpt.pt")
    print("saved", sorted(torch.load("ckpt.pt")), flush=True)
'''


@pytest.mark.parametrize(
    "wrap",
    ["model = nn.Linear(4, 1)\n    model = nn.DataParallel(model)\n    model.to(device)", "model = nn.DataParallel(nn.Linear(4, 1)).to(device)"],
    ids=["wrapped_then_moved", "wrapped_where_built"],
)
def test_a_wrap_in_the_main_block_stays_there_and_keeps_its_keys(tmp_path: Path, wrap: str) -> None:
    """A trial's crash: ``if __name__ == "__main__":`` was read as a condition on the wrap, which was hoisted out of
    the block to module level, after the training and the clean-up ("Default process group has not been
    initialized", or a NameError); the checkpoint also lost its ``module.`` keys."""
    original, migrated, launch = train_original_and_migrated(tmp_path, IN_MAIN_BLOCK.replace("WRAP", wrap))
    text = (migrated / "train.py").read_text()
    block = text[text.index('if __name__ == "__main__":'):]
    assert "DistributedDataParallel(" in block and block.index("DistributedDataParallel(") < block.index("opt = "), text
    assert "saved ['module.bias', 'module.weight']" in launch.output, launch.output


TUPLE_WRAPS = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
gen_ab, gen_ba, disc_a, disc_b = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1), nn.Linear(4, 1)
if torch.cuda.device_count() > 1:
    gen_ab, gen_ba = nn.DataParallel(gen_ab), nn.DataParallel(gen_ba)
    disc_a, disc_b = nn.DataParallel(disc_a), nn.DataParallel(disc_b)
params = [*gen_ab.parameters(), *gen_ba.parameters(), *disc_a.parameters(), *disc_b.parameters()]
opt = torch.optim.SGD(params, lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=16)
for epoch in range(2):
    for (x,) in loader:
        loss = (disc_b(gen_ab(x)) + disc_a(gen_ba(x))).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
torch.save(gen_ab.state_dict(), "gen_ab.pt")
print("saved", sorted(torch.load("gen_ab.pt")), flush=True)
'''


def test_wraps_assigned_in_tuples_under_a_test_move_out_once_and_keep_their_keys(tmp_path: Path) -> None:
    """A trial's CycleGAN: each tuple line was moved out twice (DDP inside DDP, 'module.module.' keys), an
    ``if ...: pass`` stayed, and a single tuple line saved 'module.' keys the original never had."""
    original, migrated, launch = train_original_and_migrated(tmp_path, TUPLE_WRAPS)
    text = (migrated / "train.py").read_text()
    assert text.count("DistributedDataParallel(") == 4 and "DataParallel(gen" not in text.replace("DistributedDataParallel(", ""), text
    assert "if torch.cuda.device_count() > 1" not in text and "pass" not in text, text
    assert "runtime.save(gen_ab.module.state_dict()" in text, text
    plain = run_python(original / "train.py", cwd=original, timeout=120).output
    assert "saved ['bias', 'weight']" in plain and "saved ['bias', 'weight']" in launch.output, launch.output


ENGINE = '''
import torch


class Trainer:
    def __init__(self, net, loader):
        self.net, self.loader = net, loader
        self.opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def fit(self, epochs):
        for epoch in range(epochs):
            for xb, yb in self.loader:
                loss = (self.net(xb) - yb).pow(2).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()

    def save(self, path):
        torch.save(self.net.state_dict(), path)
'''

MAIN_BLOCK_ENTRY = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from engine import Trainer

if __name__ == "__main__":
    torch.manual_seed(0)
    net = nn.DataParallel(nn.Linear(4, 1))
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    trainer = Trainer(net, loader)
    trainer.fit(2)
    trainer.save("net.pt")
    print("saved", sorted(torch.load("net.pt")), flush=True)
'''


def test_a_wrap_in_the_main_block_keeps_the_keys_another_modules_save_writes(tmp_path: Path) -> None:
    """A trial's WGAN trainer: the main block of the entry is no condition for the save of another module either
    (its checkpoints had lost their module. keys, 0 items for a human)."""
    (tmp_path / "engine.py").write_text(ENGINE)
    text, report, _ = migrate_script(tmp_path, MAIN_BLOCK_ENTRY)
    assert 'state_dict(prefix="module.")' in (tmp_path / "engine.py").read_text(), report
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "saved ['module.bias', 'module.weight']" in launch.output, launch.output


@pytest.mark.parametrize(
    ("wraps", "kept"),
    [
        ("    model = nn.DataParallel(model.to(device))\n    head = nn.DataParallel(head)\n", "    model = model.to(device)\n"),
        ("    model = nn.DataParallel(nn.Linear(4, 4))\n    head = nn.DataParallel(head)\n", "    model = nn.Linear(4, 4)\n"),
    ],
    ids=["moved_in_the_wrap", "built_in_the_wrap"],
)
def test_a_wrap_that_leaves_the_models_set_up_behind_keeps_its_branch(tmp_path: Path, wraps: str, kept: str) -> None:
    """A review: with a second wrap under the same test, the whole if was dropped, and with it the move (or the
    model itself: NameError)."""
    source = (
        "import torch\nimport torch.nn as nn\n\ndevice = 'cpu'\nmodel, head = nn.Linear(4, 4), nn.Linear(4, 1)\n"
        "if torch.cuda.device_count() > 1:\n" + wraps +
        "opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)\n"
        "for step in range(2):\n    head(model(torch.randn(3, 4))).sum().backward()\n    opt.step()\n"
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "if torch.cuda.device_count() > 1:\n" + kept in migrated, report + migrated
    assert migrated.count("DistributedDataParallel(") == 2 and "pass" not in migrated, migrated


#: ``nn.DataParallel(model).to(device)`` on a model with BatchNorm: the move goes inside the wrap, the conversion to
#: SyncBatchNorm around it. A trial: the report listed DDP002 twice and the model was moved twice
#: (``convert_sync_batchnorm(model.to(device)).to(runtime.device())``).
MOVED_AFTER_THE_WRAP_WITH_BATCHNORM = '''
import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
model = nn.DataParallel(model).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 4)), batch_size=8, drop_last=True)
for (x,) in loader:
    optimizer.zero_grad()
    model(x.to(device)).mean().backward()
    optimizer.step()
'''


def test_a_move_chained_on_the_wrap_of_a_batchnorm_model_is_made_once(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, MOVED_AFTER_THE_WRAP_WITH_BATCHNORM)
    assert code == 0, report
    assert "runtime.convert_sync_batchnorm(model.to(device)), device_ids" in text, text
    assert text.count(".to(") == 2, text  # the model's move and the batch's
    assert report.count("DDP002") == 1, report


#: "Wrap unless wrapped already" after a wrap on many GPUs (a trial): the migration made both DDP wraps, and the
#: model was a DDP of a DDP (``model.module.fc`` failed). With no wrap before it, the checkpoint's keys lost their
#: ``module.`` prefix, and the program's own reload into a DataParallel failed.
WRAPPED_UNLESS_WRAPPED = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
    model = Net()
    MANY_GPUS
    model = nn.DataParallel(model) if not isinstance(model, nn.DataParallel) else model
    model.to(device)
    opt = torch.optim.SGD(model.module.fc.parameters(), lr=0.1)
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(model.state_dict(), "final.pth")
    fresh = nn.DataParallel(Net())
    fresh.load_state_dict(torch.load("final.pth"))
    print("reloaded", fresh.module.fc.weight.sum().item())


if __name__ == "__main__":
    main()
'''
MANY_GPUS = "if torch.cuda.device_count() > 1:\n        model = nn.DataParallel(model)"


@pytest.mark.parametrize("many_gpus", [MANY_GPUS, "pass"], ids=["after-a-wrap", "alone"])
def test_a_wrap_unless_wrapped_is_one_wrap_keeping_its_keys(tmp_path: Path, many_gpus: str) -> None:
    text, report, code = migrate_script(tmp_path, WRAPPED_UNLESS_WRAPPED.replace("MANY_GPUS", many_gpus))
    assert code == 0, report
    assert "TODO" not in text, text
    assert 'runtime.save(runtime.unwrap(model).state_dict(prefix="module."), "final.pth")' in text, text
    assert report.count("DDP002") == 1, report
    if many_gpus == "pass":
        assert "model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n    model.to" not in text


def test_a_wrap_unless_wrapped_after_a_wrap_trains_and_reloads_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    original, migrated, launch = train_original_and_migrated(tmp_path, WRAPPED_UNLESS_WRAPPED.replace("MANY_GPUS", MANY_GPUS))
    assert launch.output.count("reloaded") == 1, launch.output


def test_a_wrap_unless_wrapped_keeps_only_the_wrapper_test(tmp_path: Path) -> None:
    # (a review: ``DP(model) if torch.cuda.device_count() > 1 and not isinstance(model, DP) else model`` kept its GPU
    # count, and a CPU or one-GPU run trained unwrapped)
    source = (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import DataParallel as DP\n"
        "from torch.utils.data import DataLoader, TensorDataset\n\n\n"
        "def parallelize(model):\n"
        "    return DP(model) if torch.cuda.device_count() > 1 and not isinstance(model, DP) else model\n\n\n"
        "def main():\n    model = parallelize(nn.Linear(4, 1))\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x, y in DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4):\n"
        "        loss = nn.functional.mse_loss(model(x), y)\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    text, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "device_count" not in text and "if not isinstance(model, DistributedDataParallel)" in text, text


BRANCHES_WITH_A_MOVE = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    model = nn.Linear(4, 1)
    if torch.cuda.is_available():
        model = nn.DataParallel(model).cuda()
    else:
        model = nn.DataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
'''


def test_every_branch_wrapping_with_its_own_device_move_becomes_one_wrap(tmp_path: Path) -> None:
    """``if cuda: model = DP(model).cuda() else: model = DP(model)`` (a trial's legacy program): each branch
    became a DDP wrap after the chain, one stacked on the other (``model.module`` was a wrapper: the program's
    first ``model.module.method()`` failed), the branches left as ``pass``; and the checkpoint, written with
    ``module.`` keys on every path by the original, lost them."""
    migrated, report, _ = migrate_script(tmp_path, BRANCHES_WITH_A_MOVE)
    assert migrated.count("DistributedDataParallel(") == 1 and "pass" not in migrated, migrated
    assert "if torch.cuda.is_available():" not in migrated
    assert 'state_dict(prefix="module.")' in migrated and "keeps the module. keys" in report, report


def test_a_conditional_move_after_the_wrap_goes_before_it(tmp_path: Path) -> None:
    """``if device_count() > 1: model = DP(model)`` then ``model = model.cuda() if torch.cuda.is_available() else
    model``: the wrap went first, of a model on the CPU with this GPU's ids (DDP refuses it on a GPU machine)."""
    source = BRANCHES_WITH_A_MOVE.replace(
        "    if torch.cuda.is_available():\n        model = nn.DataParallel(model).cuda()\n    else:\n        model = nn.DataParallel(model)\n",
        "    if torch.cuda.device_count() > 1:\n        model = nn.DataParallel(model)\n    model = model.cuda() if torch.cuda.is_available() else model\n",
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    move = migrated.index("    model = model.to(runtime.device()) if torch.cuda.is_available() else model\n")
    assert move < migrated.index("    model = DistributedDataParallel(model"), migrated
    assert "DDP002" in report, report
