"""Models built where the training does not follow: in the branches of an ``if`` (a resume loads the model,
a fresh run builds it), or right in the call that hands them to a trainer. A trial's programs trained
unwrapped models under torchrun (the ranks drifted apart) with 0 items for a human.
"""

from __future__ import annotations

import re
from pathlib import Path

from launch import run_torchrun
from migrated import migrate_script, printed_on_every_rank

BUILT_IN_BRANCHES = '''
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(64, 4)
loader = DataLoader(TensorDataset(X, X.sum(1, keepdim=True)), batch_size=8, shuffle=True)
if len(sys.argv) > 1 and sys.argv[1] == "resume":
    net = nn.Linear(4, 1)
    net.load_state_dict(torch.load("weights.pt"))
else:
    net = nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
for epoch in range(3):
    for x, y in loader:
        loss = (net(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print(f"weight sum {sum(p.sum().item() for p in net.parameters()):.6f}")
'''


def test_a_model_built_in_each_branch_is_wrapped_after_them(tmp_path: Path) -> None:
    text, report, _ = migrate_script(tmp_path, BUILT_IN_BRANCHES)
    assert "    net = nn.Linear(4, 1)\nnet = DistributedDataParallel(net" in text, report + text
    (tmp_path / "train.py").write_text(printed_on_every_rank(text))
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    sums = set(re.findall(r"weight sum (-?\d+\.\d+)", launch.output))
    assert len(re.findall(r"weight sum", launch.output)) == 2 and len(sums) == 1, launch.output  # one model


BUILT_IN_THE_CALL = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader
        self.opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                loss = (self.model(x) - y).pow(2).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()


if __name__ == "__main__":
    X = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(X, X.sum(1, keepdim=True)), batch_size=8, shuffle=True)
    Trainer(nn.Linear(4, 1), loader).fit(3)
'''


def test_a_model_built_in_the_call_that_hands_it_to_a_trainer_is_reviewed(tmp_path: Path) -> None:
    _, report, _ = migrate_script(tmp_path, BUILT_IN_THE_CALL)
    assert "DDP011 `nn.Linear(4, 1)` is built in the call that hands it to the code that trains it" in report, report
    assert "1 item(s) need a human" in report, report


BUILT_IN_THE_CALL_BESIDE_A_WRAP = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train(gen, disc, loader, epochs):
    opt = torch.optim.SGD([*gen.parameters(), *disc.parameters()], lr=0.1)
    for epoch in range(epochs):
        for (x,) in loader:
            loss = disc(gen(x)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


gen = nn.Linear(4, 4)
loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=16)
train(gen, nn.Linear(4, 1), loader, 2)
'''


def test_a_model_built_in_the_call_is_reviewed_beside_a_model_that_is_wrapped(tmp_path: Path) -> None:
    """A review: the generator got its wrap, and that wrap silenced the review of the discriminator built in the
    call (the ranks trained different discriminators, 0 items)."""
    _, report, _ = migrate_script(tmp_path, BUILT_IN_THE_CALL_BESIDE_A_WRAP)
    assert "DDP011 line 18: gen wrapped in DistributedDataParallel" in report, report
    assert "DDP011 `nn.Linear(4, 1)` is built in the call" in report and "1 item(s) need a human" in report, report
