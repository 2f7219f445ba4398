"""Where ``find_unused_parameters=True`` must not be added although a forward skips a layer on some calls:
the forward checkpoints activations the reentrant way (``checkpoint(f, x, use_reentrant=True)``), or one
step runs the model several times before one ``backward()`` (a multi-task loss over ``model(x, "cls")``
and ``model(x, "reg")``). With the flag, DDP marked a parameter ready twice and both runs crashed, as
plain python too (a trial, exit 0); without it, they train the original's weights.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script, train_original_and_migrated

REENTRANT = 'import torch\nimport torch.nn as nn\nfrom torch.utils.checkpoint import checkpoint\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.inp = nn.Linear(8, 8)\n        self.block = nn.Linear(8, 8)\n        self.out = nn.Linear(8, 1)\n\n    def forward(self, x, features=False):\n        x = checkpoint(self.block, self.inp(x), use_reentrant=True)\n        if features:\n            return x\n        return self.out(x)\n\n\ndef main():\n    torch.manual_seed(0)\n    loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randn(32, 1)), batch_size=8)\n    model = Net()\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for epoch in range(2):\n        for x, y in loader:\n            loss = nn.functional.mse_loss(model(x), y)\n            opt.zero_grad()\n            loss.backward()\n            opt.step()\n    print("checksum", sum(p.sum().item() for p in model.parameters()))\n\n\nif __name__ == "__main__":\n    main()\n'

TWO_FORWARDS = 'import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\nclass MultiTask(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.shared = nn.Linear(4, 8)\n        self.cls_head = nn.Linear(8, 3)\n        self.reg_head = nn.Linear(8, 1)\n\n    def forward(self, x, task):\n        h = self.shared(x)\n        return self.cls_head(h) if task == "cls" else self.reg_head(h).squeeze(-1)\n\n\ndef main():\n    torch.manual_seed(0)\n    cls_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)\n    reg_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32)), batch_size=8)\n    model = MultiTask()\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for epoch in range(2):\n        for (xc, yc), (xr, yr) in zip(cls_loader, reg_loader):\n            loss = F.cross_entropy(model(xc, "cls"), yc) + F.mse_loss(model(xr, "reg"), yr)\n            opt.zero_grad()\n            loss.backward()\n            opt.step()\n    print("checksum", sum(p.sum().item() for p in model.parameters()))\n\n\nif __name__ == "__main__":\n    main()\n'


@pytest.mark.parametrize("source", [REENTRANT, TWO_FORWARDS], ids=["reentrant-checkpoint", "two-forwards"])
def test_no_search_for_unused_parameters_where_it_breaks_the_step(tmp_path: Path, source: str) -> None:
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "DistributedDataParallel(" in migrated and "find_unused_parameters" not in migrated, migrated


@pytest.mark.distributed
def test_the_two_forward_step_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    _, _, launch = train_original_and_migrated(tmp_path, TWO_FORWARDS)
    assert "checksum 4.4046" in launch.output, launch.output


PROBE = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Probe(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        FORWARD
        return self.head(feats)


def main():
    torch.manual_seed(0)
    model = Probe(nn.Linear(4, 8))
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    print("trained", flush=True)


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("forward", ["with torch.no_grad():\n            feats = self.encoder(x)", "feats = self.encoder(x).detach()"], ids=["no-grad", "detach"])
def test_a_layer_run_only_without_gradients_is_searched_for(tmp_path: Path, forward: str) -> None:
    """A linear probe's encoder, run under ``no_grad`` (or detached) in ``forward()`` and never frozen: its
    parameters require gradients that never come, and DDP failed at the second step ("Expected to have
    finished reduction"), in plain python too. The wrap now looks for unused parameters."""
    from migrated import migrate_script

    migrated, report, code = migrate_script(tmp_path, PROBE.replace("FORWARD", forward))
    assert code == 0, report
    assert "find_unused_parameters=True" in migrated
    assert "runs `self.encoder` only without gradients" in report, report


@pytest.mark.distributed
def test_a_probe_with_a_gradless_encoder_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun
    from migrated import migrate_script

    migrate_script(tmp_path, PROBE.replace("FORWARD", "with torch.no_grad():\n            feats = self.encoder(x)"))
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "trained" in launch.output, launch.output


#: One forward per step, chosen by the step: ``model(x, with_aux=True)`` on even steps runs the auxiliary head,
#: ``model(x)`` on the others does not (a trial's crash at step 2: the two calls in the two branches were counted
#: as two forwards of one step, so no search for unused parameters was asked for).
ALTERNATING = TWO_FORWARDS.replace(
    '    def forward(self, x, task):\n        h = self.shared(x)\n        return self.cls_head(h) if task == "cls" else self.reg_head(h).squeeze(-1)\n',
    "    def forward(self, x, with_aux=False):\n        h = self.shared(x)\n        if with_aux:\n            return self.cls_head(h), self.reg_head(h).squeeze(-1)\n        return self.cls_head(h)\n",
).replace(
    '            loss = F.cross_entropy(model(xc, "cls"), yc) + F.mse_loss(model(xr, "reg"), yr)\n',
    "            if epoch % 2 == 0:\n                out, aux = model(xc, with_aux=True)\n                loss = F.cross_entropy(out, yc) + F.mse_loss(aux, yr)\n"
    "            else:\n                loss = F.cross_entropy(model(xc), yc)\n",
)


def test_one_forward_in_each_branch_of_a_step_is_one_forward_per_step(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, ALTERNATING)
    assert code == 0, report
    assert "find_unused_parameters=True" in migrated, report


@pytest.mark.distributed
def test_the_alternating_heads_train_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    _, _, launch = train_original_and_migrated(tmp_path, ALTERNATING)
    assert "checksum" in launch.output, launch.output
