"""DDP042 and a GAN's discriminator frozen and unfrozen whole around the generator's step (WGAN-GP's shape).

A trial's WGAN-GP got two review lines ("freezing after it fails at the next step"), yet trained under torchrun
with the ranks' weights equal: while every parameter of the wrapped model is frozen none of their gradient hooks
fires and DDP has nothing to reduce; unfrozen, they are what DDP wrapped. A part of the model frozen after the
wrap, or a model wrapped while frozen, is still reported.
"""

from __future__ import annotations

from pathlib import Path

import pytest
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


def test_a_model_partly_frozen_before_the_wrap_then_toggled_whole_is_reported(tmp_path: Path) -> None:
    """Unfreezing the whole wrapper unfreezes what the wrap saw frozen: those gradients are never averaged."""
    assert len(findings(tmp_path, before="D[0].requires_grad_(False)\n")) == 2
    loop = "for p in D[1].parameters():\n    p.requires_grad = False\n"
    assert len(findings(tmp_path, before=loop)) == 2


def test_a_model_frozen_under_another_name_before_the_wrap_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    renamed = GAN.replace("D = nn.Sequential(", "net = nn.Sequential(").replace("D = DDP(D)", "D = DDP(net)")
    path.write_text(renamed.replace("PARAMETERS", "D.parameters()").replace("BEFORE\n", "net[0].weight.requires_grad = False\n"))
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP042", str(path)])
    assert len([line for line in result.output.splitlines() if "DDP042" in line]) == 2


def test_another_model_frozen_before_the_wrap_leaves_the_toggle_alone(tmp_path: Path) -> None:
    """A frozen feature network beside the GAN (a perceptual loss) is not the discriminator."""
    frozen = "features = nn.Linear(4, 4)\nfeatures.requires_grad_(False)\n"
    assert findings(tmp_path, before=frozen) == []


def test_a_whole_wrapped_model_toggled_by_requires_grad_underscore_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    direct = GAN.replace("BEFORE\n", "")
    direct = direct.replace("    for p in PARAMETERS:\n        p.requires_grad = True\n", "    D.requires_grad_(True)\n")
    direct = direct.replace("    for p in PARAMETERS:\n        p.requires_grad = False\n", "    D.module.requires_grad_(False)\n")
    path.write_text(direct)
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP042", str(path)])
    assert "DDP042" not in result.output, result.output
    path.write_text(direct.replace("D.module.requires_grad_(False)", "D.module[0].requires_grad_(False)"))
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP042", str(path)])
    assert "DDP042" in result.output, result.output


HELPER = """def set_requires_grad(nets, requires_grad=False):
    if not isinstance(nets, list):
        nets = [nets]
    for net in nets:
        if net is not None:
            for param in net.parameters():
                param.requires_grad = requires_grad


"""


def helper_program(first: str, second: str, before: str = "") -> str:
    program = GAN.replace("BEFORE\n", before).replace("G = DDP(", HELPER.replace("\n\n\n", "\n\n") + "G = DDP(")
    program = program.replace("    for p in PARAMETERS:\n        p.requires_grad = True\n", f"    set_requires_grad({first}, True)\n")
    return program.replace("    for p in PARAMETERS:\n        p.requires_grad = False\n", f"    set_requires_grad({second}, False)\n")


def test_a_helper_toggling_whole_wrapped_models_is_left_alone(tmp_path: Path) -> None:
    """pix2pix's ``set_requires_grad(self.netD, False)``: every parameter of the models it is handed."""
    path = tmp_path / "train.py"
    for first, second in (("D", "D"), ("[D]", "[D, G]")):
        path.write_text(helper_program(first, second))
        result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP042", str(path)])
        assert "DDP042" not in result.output, (first, second, result.output)


def test_a_helper_handed_a_part_or_a_model_frozen_before_the_wrap_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    for program in (helper_program("D", "D.module[0]"), helper_program("D", "D", before="D[0].requires_grad_(False)\n")):
        path.write_text(program)
        result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP042", str(path)])
        assert "DDP042" in result.output, (program, result.output)


def test_a_helper_that_lists_a_lone_model_itself_is_followed(tmp_path: Path) -> None:
    """``for net in nets if isinstance(nets, list) else [nets]:`` (a trial's GAN): every parameter of what it is
    handed; and a model no wrap holds among them (a frozen feature network) is DDP's business neither way."""
    path = tmp_path / "train.py"
    helper = HELPER.replace(
        "    if not isinstance(nets, list):\n        nets = [nets]\n    for net in nets:\n",
        "    for net in nets if isinstance(nets, list) else [nets]:\n",
    )
    program = helper_program("D", "[D, features]", before="features = nn.Linear(4, 4)\n").replace(HELPER.replace("\n\n\n", "\n\n"), helper.replace("\n\n\n", "\n\n"))
    assert "for net in nets if isinstance" in program
    path.write_text(program)
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP042", str(path)])
    assert "DDP042" not in result.output, result.output


GLOBAL_MODEL = '''import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
FREEZE


def main():
    dist.init_process_group("gloo")
    D = DDP(net)
    opt = torch.optim.SGD(D.parameters(), lr=0.1)
    for step in range(6):
        D.requires_grad_(step % 2 == 0)
        loss = D(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
'''

WRAPPED_BY_A_HELPER = '''import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

def wrap(model):
    model = model.to("cpu")
    return DDP(model)

dist.init_process_group("gloo")
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
net[0].requires_grad_(False)
D = wrap(net)
opt = torch.optim.SGD(D.parameters(), lr=0.1)
for step in range(6):
    if step == 3:
        D.requires_grad_(True)
    loss = D(torch.randn(8, 4) + dist.get_rank()).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
w = D.module[0].weight.detach().clone()
ws = [torch.zeros_like(w) for _ in range(2)]
dist.all_gather(ws, w)
print(dist.get_rank(), "frozen part equal:", torch.equal(ws[0], ws[1]))
dist.destroy_process_group()
'''


@pytest.mark.parametrize("program", ["global", "helper"])
def test_a_part_frozen_before_a_wrap_in_another_function_is_found(tmp_path: Path, program: str) -> None:
    """A review: the freeze sat at the module's top level (the wrap in ``main()``), or before ``D = wrap(net)`` of
    ``def wrap(model): return DDP(model)``; only the wrap's own function was searched, and unfreezing the whole
    wrapper went unreported (under torchrun the part's weights then differed between the ranks)."""
    path = tmp_path / "train.py"
    frozen = GLOBAL_MODEL.replace("FREEZE", "net[0].requires_grad_(False)") if program == "global" else WRAPPED_BY_A_HELPER
    whole = GLOBAL_MODEL.replace("FREEZE\n", "") if program == "global" else WRAPPED_BY_A_HELPER.replace("net[0].requires_grad_(False)\n", "")
    path.write_text(frozen)
    assert "DDP042" in CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP042", str(path)]).output
    path.write_text(whole)
    assert "DDP042" not in CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP042", str(path)]).output
