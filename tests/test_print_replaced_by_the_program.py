"""A program that replaces the builtin ``print`` with one that keeps quiet off rank 0 (``setup_for_distributed`` of
DETR, DeiT and MAE: ``builtins.print = print``): its prints are rank 0's already. A trial's lint of DETR reported 14
of them as printing on every process (DDP010), and the migration would have rewritten them all."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

MISC = """import os

import torch.distributed as dist


def setup_for_distributed(is_master):
    import builtins as __builtin__
    builtin_print = __builtin__.print

    def print(*args, **kwargs):
        force = kwargs.pop("force", False)
        if is_master or force:
            builtin_print(*args, **kwargs)

    REPLACE


def init_distributed_mode():
    if "RANK" not in os.environ:
        return False
    dist.init_process_group(backend="gloo")
    setup_for_distributed(dist.get_rank() == 0)
    return True
"""

MAIN = """import torch

from misc import init_distributed_mode


def main():
    distributed = init_distributed_mode()
    model = torch.nn.Linear(4, 2)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 4)), batch_size=4)
    for (x,) in loader:
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("loss", loss.item())


if __name__ == "__main__":
    main()
"""


def _lint(folder: Path, replace: str) -> str:
    (folder / "misc.py").write_text(MISC.replace("REPLACE", replace))
    (folder / "main.py").write_text(MAIN)
    return CliRunner().invoke(cli, ["lint", "--select", "DDP010", str(folder)]).output


def test_the_prints_of_a_program_that_replaced_print_are_its_own_choice(tmp_path: Path) -> None:
    assert "DDP010" not in _lint(tmp_path, "__builtin__.print = print")


def test_the_prints_of_a_program_that_only_defines_a_print_are_every_ranks(tmp_path: Path) -> None:
    assert "main.py:18:9: DDP010 print runs on every process" in _lint(tmp_path, "return print")


def test_the_prints_of_a_program_whose_print_decides_nothing_are_every_ranks(tmp_path: Path) -> None:
    # (a review: ``builtins.print = functools.partial(builtins.print, flush=True)`` silenced DDP010 everywhere)
    output = _lint(tmp_path, "__builtin__.print = __import__('functools').partial(builtin_print, flush=True)")
    assert "main.py:18:9: DDP010 print runs on every process" in output, output


def test_the_prints_of_a_program_whose_print_decides_on_something_else_are_every_ranks(tmp_path: Path) -> None:
    # (a review: a replacement that tests its own keywords, ``if "flush" not in kwargs``, decides nothing of ranks)
    misc = MISC.replace("if is_master or force:", 'if "flush" not in kwargs:')
    (tmp_path / "misc.py").write_text(misc.replace("REPLACE", "__builtin__.print = print"))
    (tmp_path / "main.py").write_text(MAIN)
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP010", str(tmp_path)]).output
    assert "main.py:18:9: DDP010 print runs on every process" in output, output
