"""``--local_rank`` of the entry's parser read in another module of the program.

torchvision's references and many research repositories parse ``--local_rank`` in train.py and read it in
utils.py (``init_distributed_mode(args)``: ``args.gpu = args.local_rank``). A trial's migration removed the
option from train.py and left utils.py as it was: the migrated program stopped at once with
``AttributeError: 'Namespace' object has no attribute 'local_rank'`` while the report said nothing of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from ddp_migrate.cli import cli

TRAIN = '''\
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import run_options


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=DEFAULT)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    run_options.setup_run(args)
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    print(f"slot {args.slot} weight {model.weight.sum().item():.4f}", flush=True)  # (one write per line: the ranks print together)


if __name__ == "__main__":
    main()
'''

HELPERS = '''\
def setup_run(opts):
    opts.slot = SLOT
'''


def write(folder: Path, default: str, slot: str) -> None:
    (folder / "train.py").write_text(TRAIN.replace("DEFAULT", default))
    (folder / "run_options.py").write_text(HELPERS.replace("SLOT", slot))


def migrate(folder: Path) -> str:
    result = CliRunner().invoke(cli, ["migrate", str(folder / "train.py")])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_read_in_another_module_comes_from_the_environment(tmp_path: Path) -> None:
    write(tmp_path, "0", "opts.local_rank")
    report = migrate(tmp_path)
    helpers = (tmp_path / "run_options.py").read_text()
    assert "opts.slot = runtime.local_rank()" in helpers, helpers
    train = (tmp_path / "train.py").read_text()
    assert "--local_rank" not in train, train  # removed once no module reads it
    # One line per edit, the option's final outcome only (a review: "kept" and "removed" both were listed).
    assert report.count("--local_rank option removed") == 1 and "kept with its default" not in report, report
    assert report.count("args.local_rank replaced by runtime.local_rank()") == 1, report


def test_a_test_of_the_launchers_default_in_another_module_keeps_the_option(tmp_path: Path) -> None:
    """``if opts.local_rank == -1`` (no launcher) in the helper: the option stays, its default read from
    LOCAL_RANK (-1 without torchrun), and the helper's test keeps its meaning."""
    write(tmp_path, "-1", "0 if opts.local_rank == -1 else opts.local_rank")
    migrate(tmp_path)
    assert (tmp_path / "run_options.py").read_text() == HELPERS.replace("SLOT", "0 if opts.local_rank == -1 else opts.local_rank")
    train = (tmp_path / "train.py").read_text()
    assert '"--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", -1))' in train, train


@pytest.mark.e2e
@pytest.mark.distributed
def test_the_migrated_program_runs_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    write(tmp_path, "0", "opts.local_rank")
    migrate(tmp_path)
    result = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert "slot 0 weight" in result.stdout, result.stdout + result.stderr


SUBMITIT_MAIN = """import argparse

import torch


def get_args_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", default=0, type=int)
    return parser


def train(args):
    torch.distributed.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    model(torch.randn(2, 2)).sum().backward()
"""

SUBMITIT_RUN = """import submitit

import main


class Trainer:
    def __init__(self, args):
        self.args = args

    def __call__(self):
        job_env = submitit.JobEnvironment()
        self.args.gpu = job_env.local_rank
        main.train(self.args)


if __name__ == "__main__":
    args = main.get_args_parser().parse_args()
    submitit.AutoExecutor(folder="jobs").submit(Trainer(args))
"""


def test_a_local_rank_a_library_object_holds_is_not_the_launchers_option(tmp_path: Path) -> None:
    """DINO's and MAE's submitit runners: ``job_env.local_rank`` of ``submitit.JobEnvironment()`` became
    ``runtime.local_rank()``, which reads LOCAL_RANK (0 on every task submitit starts), beside a ``--local_rank``
    option of the program."""
    (tmp_path / "main.py").write_text(SUBMITIT_MAIN)
    (tmp_path / "run.py").write_text(SUBMITIT_RUN)
    CliRunner().invoke(cli, [str(tmp_path / "run.py")], catch_exceptions=False)
    assert "self.args.gpu = job_env.local_rank" in (tmp_path / "run.py").read_text()
