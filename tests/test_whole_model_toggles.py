"""DDP042 and a GAN's discriminator frozen and unfrozen whole around the generator's step (WGAN-GP's shape).

A trial's WGAN-GP got two review lines ("freezing after it fails at the next step"), yet trained under torchrun
with the ranks' weights equal: while every parameter of the wrapped model is frozen none of their gradient hooks
fires and DDP has nothing to reduce; unfrozen, they are what DDP wrapped. A part of the model frozen after the
wrap, or a model wrapped while frozen, is still reported.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

GAN = """import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
G = DDP(nn.Sequential(nn.Linear(2, 4)))
D = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
BEFORE
D = DDP(D)
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
for step in range(10):
    real = torch.randn(8, 4)
    for p in PARAMETERS:
        p.requires_grad = True
    z = torch.randn(8, 2)
    d_loss = D(G(z).detach()).mean() - D(real).mean()
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    for p in PARAMETERS:
        p.requires_grad = False
    g_loss = -D(G(z)).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
dist.destroy_process_group()
"""


def findings(tmp_path: Path, parameters: str = "D.parameters()", before: str = "") -> list[str]:
    path = tmp_path / "train.py"
    path.write_text(GAN.replace("PARAMETERS", parameters).replace("BEFORE\n", before))
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP042", str(path)])
    return [line for line in result.output.splitlines() if "DDP042" in line]


def test_a_whole_wrapped_model_toggled_around_a_step_is_left_alone(tmp_path: Path) -> None:
    assert findings(tmp_path) == []


def test_a_part_of_the_model_toggled_after_the_wrap_is_reported(tmp_path: Path) -> None:
    assert len(findings(tmp_path, parameters="D.module[0].parameters()")) == 2


def test_a_model_wrapped_while_frozen_is_reported(tmp_path: Path) -> None:
    frozen = "for p in D.parameters():\n    p.requires_grad = False\n"
    assert len(findings(tmp_path, before=frozen)) == 2
