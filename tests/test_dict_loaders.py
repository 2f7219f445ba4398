"""Loaders kept in dicts under string keys (``loaders = {"train": DataLoader(...), "val": ...}``,
``loaders["train"] = ...`` in a builder that returns the dict, ``self.loaders["train"]`` in a Trainer): the
data flow follows the dict's items, so the loader a training loop iterates by its key is sharded and gets
``set_epoch``, and the one only evaluated is left whole. A dict iterated by a key the analysis cannot read
(``loaders[phase]``) stays a review item (tests/test_loaders.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.analysis.loaders import loader_facts
from migrated import migrate_script, train_original_and_migrated

LITERAL = '''
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_set = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    val_set = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    loaders = {
        "train": DataLoader(train_set, batch_size=16, shuffle=False),
        "val": DataLoader(val_set, batch_size=16),
    }
    model = nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        seen = 0
        for x, y in loaders["train"]:
            seen += len(x)
            x, y = x.to(device), y.to(device)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            val = sum(nn.functional.mse_loss(model(x.to(device)), y.to(device)).item() for x, y in loaders["val"])
        print(f"epoch {epoch} val {val:.4f}")
        sys.stderr.write(f"samples {seen}\\n")
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''

TRAINER = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def build_loaders(batch_size):
    train_set = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    val_set = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    loaders = {}
    loaders["train"] = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    loaders["val"] = DataLoader(val_set, batch_size=batch_size)
    return loaders


class Trainer:
    def __init__(self, model, loaders):
        self.model = model
        self.loaders = loaders
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_epoch(self):
        for x, y in self.loaders["train"]:
            loss = nn.functional.mse_loss(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return loss.item()

    @torch.no_grad()
    def validate(self):
        total = 0.0
        for x, y in self.loaders["val"]:
            total += nn.functional.mse_loss(self.model(x), y).item()
        return total

    def fit(self, epochs):
        for epoch in range(epochs):
            loss = self.train_epoch()
            print(epoch, loss, self.validate())
        torch.save(self.model.state_dict(), "final.pt")


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    Trainer(model, build_loaders(16)).fit(3)
'''


def _analysis(source: str) -> ScriptAnalysis:
    return ScriptAnalysis(cst.parse_module(textwrap.dedent(source)))


def test_the_items_of_a_dict_flow_to_their_subscripts() -> None:
    analysis = _analysis(TRAINER)
    train, val = analysis.loader_calls
    loops = {cst.Module(body=[]).code_for_node(loop.loader_expr): loop for loop in analysis.loader_loops}
    assert loops['self.loaders["train"]'].loader_calls == {train}
    assert loops['self.loaders["val"]'].loader_calls == {val}
    facts = loader_facts(analysis)
    assert facts.training_loaders == {train} and facts.evaluation_loaders == {val}
    assert not facts.dict_training


def test_a_key_the_analysis_cannot_read_reaches_nothing() -> None:
    analysis = _analysis(
        """
        from torch.utils.data import DataLoader
        loaders = {"train": DataLoader(a), "val": DataLoader(b)}
        key = pick()
        for x in loaders[key]:
            f(x).backward()
        for x in loaders["test"]:
            f(x).backward()
        """
    )
    assert all(not loop.loader_calls for loop in analysis.loader_loops)
    assert set(loader_facts(analysis).dict_training) == set(analysis.loader_calls)


def test_a_dict_literal_of_loaders_is_sharded_by_its_training_key(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, LITERAL)
    assert code == 0, report
    assert 'sampler=DistributedSampler(train_set, shuffle=False)' in migrated
    assert '"val": DataLoader(val_set, batch_size=16)' in migrated
    assert 'loaders["train"].sampler.set_epoch(epoch)' in migrated
    assert "TODO" not in migrated


def test_a_trainer_over_a_built_dict_is_sharded_and_set_up_in_the_main_block(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, TRAINER)
    assert code == 0, report
    assert migrated.count("sampler=DistributedSampler(") == 1, migrated
    assert 'loaders["val"] = DataLoader(val_set, batch_size=batch_size)' in migrated
    assert 'self.loaders["train"].sampler.set_epoch(epoch)' in migrated
    # The main block trains after build_loaders() returns: the group lives around the whole block.
    main_block = migrated[migrated.index('if __name__ == "__main__":'):]
    assert "runtime.setup(" in main_block and "runtime.cleanup()" in main_block, migrated
    assert "DistributedDataParallel(" in migrated


@pytest.mark.distributed
def test_the_dict_of_loaders_trains_the_same_weights_sharded(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    original, migrated, run = train_original_and_migrated(tmp_path, LITERAL)
    assert run.output.count("epoch 2 val") == 1, run.output
    assert run.output.count("samples 32") == 2 * 3 and "samples 64" not in run.output, run.output
    expected = torch.load(original / "final.pt", weights_only=True)
    actual = torch.load(migrated / "final.pt", weights_only=True)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], atol=1e-6, rtol=0)


def test_a_loader_taken_by_position_from_a_returned_tuple_is_sharded(tmp_path: Path) -> None:
    """``loaders = build_loaders(); train(model, loaders[0])``: the item at that position."""
    source = TRAINER.replace(
        "    loaders = {}\n    loaders[\"train\"] = DataLoader(train_set, batch_size=batch_size, shuffle=True)\n"
        "    loaders[\"val\"] = DataLoader(val_set, batch_size=batch_size)\n    return loaders\n",
        "    return DataLoader(train_set, batch_size=batch_size, shuffle=True), DataLoader(val_set, batch_size=batch_size)\n",
    ).replace('self.loaders["train"]', "self.loaders[0]").replace('self.loaders["val"]', "self.loaders[1]")
    assert "self.loaders[0]" in source and "return DataLoader(" in source
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert migrated.count("sampler=DistributedSampler(train_set, shuffle=True)") == 1, migrated
    assert "self.loaders[0].sampler.set_epoch(epoch)" in migrated


def test_a_distributed_sampler_given_through_a_kwargs_dict_gets_set_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial's hand-written DDP program passed its sampler in ``**kw``: the linter saw no sampler and said
    # nothing, while every epoch repeated the first one's order.
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n\n"
        "ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))\n"
        'kw = {"batch_size": 4, "sampler": DistributedSampler(ds)}\n'
        "loader = DataLoader(ds, **kw)\n"
        "for epoch in range(3):\n"
        "    for x, y in loader:\n"
        "        model(x).sum().backward()\n"
    )
    result = CliRunner().invoke(cli, ["lint", "train.py"])
    assert "train.py:7:1: DDP006 epoch loop never calls set_epoch" in result.output, result.output
    result = CliRunner().invoke(cli, ["lint", "--fix", "train.py"])
    assert "    loader.sampler.set_epoch(epoch)\n    for x, y in loader:" in Path("train.py").read_text(), result.output


RUNNER = '''
import torch
import torch.nn as nn


class Runner:
    def __init__(self, model, loaders, optimizer):
        self.model = model
        self.loaders = loaders
        self.optimizer = optimizer

    def run(self, epochs):
        for epoch in range(epochs):
            for mode in ("train", "val"):
                self.run_epoch(mode)

    def run_epoch(self, mode):
        loader = self.loaders[mode]
        for x, y in loader:
            loss = nn.functional.mse_loss(self.model(x), y)
            if mode == "train":
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
'''

RUNNER_ENTRY = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from runner import Runner


def main():
    train_ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    val_ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    loaders = {"train": DataLoader(train_ds, batch_size=8, shuffle=True), "val": DataLoader(val_ds, batch_size=8)}
    model = nn.Linear(4, 1)
    Runner(model, loaders, torch.optim.SGD(model.parameters(), lr=0.1)).run(2)


if __name__ == "__main__":
    main()
'''


def test_a_dict_of_loaders_a_runner_in_another_module_iterates_by_phase_is_reviewed(tmp_path: Path) -> None:
    """A trial's silent wrong: the dict went to a runner class in another module (``self.loaders =
    loaders``, ``loader = self.loaders[mode]``); both loaders were called evaluation loaders and left whole,
    and nothing needed a human. Whether the phase trains is a key the analysis cannot read: a review."""
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    (tmp_path / "runner.py").write_text(RUNNER)
    (tmp_path / "train.py").write_text(RUNNER_ENTRY)
    report = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False).output
    assert "evaluation DataLoader left unsharded" not in report, report
    assert report.count("DDP005 training DataLoader built in a dict and iterated by phase") == 2, report
    assert "2 item(s) need a human" in report, report


def test_a_dict_chosen_by_a_test_between_two_written_out_dicts_is_read(tmp_path: Path) -> None:
    # (a trial on pytorch/examples' VAE: ``kwargs = {"num_workers": 1, "pin_memory": True} if use_cuda else {}``
    # made the loader's arguments "too dynamic to rewrite")
    source = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "use_cuda = torch.cuda.is_available()\nkwargs = {'num_workers': 1, 'pin_memory': True} if use_cuda else {}\n"
        "train_loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8, shuffle=True, **kwargs)\n"
        "model = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(2):\n    for (x,) in train_loader:\n        opt.zero_grad()\n"
        "        model(x).mean().backward()\n        opt.step()\n"
    )
    text, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "sampler=DistributedSampler(train_dataset, shuffle=True)" in text and "**kwargs" in text, text


def test_a_dict_chosen_by_a_test_with_a_batch_size_on_one_side_is_left_to_a_human(tmp_path: Path) -> None:
    # (a review: the keys of both sides were merged, and the rewrite read kwargs["batch_size"] where it may be absent)
    source = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "big = torch.cuda.is_available()\nkwargs = {'batch_size': 16, 'shuffle': False} if big else {}\n"
        "train_loader = DataLoader(TensorDataset(torch.randn(32, 4)), **kwargs)\n"
        "model = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(2):\n    for (x,) in train_loader:\n        opt.zero_grad()\n"
        "        model(x).mean().backward()\n        opt.step()\n"
    )
    text, report, code = migrate_script(tmp_path, source)
    assert 'kwargs["batch_size"]' not in text and "review" in report, report


ROUND_ROBIN = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def next_batch(name, iterators, loaders):
    try:
        return next(iterators[name])
    except StopIteration:
        iterators[name] = iter(loaders[name])
        return next(iterators[name])


def main():
    sets = {"a": TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), "b": TensorDataset(torch.randn(16, 4), torch.randn(16, 1))}
    loaders = {name: DataLoader(ds, batch_size=8, shuffle=False) for name, ds in sets.items()}
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    iterators = {name: iter(dl) for name, dl in loaders.items()}
    for step in range(8):
        x, y = next_batch("ab"[step % 2], iterators, loaders)
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
"""


def test_a_loader_drawn_round_robin_is_not_called_an_evaluation(tmp_path: Path) -> None:
    # A trial: loaders of a dict drawn in turn through a helper trained unsharded, and the report noted them as
    # "evaluation DataLoader left unsharded ... which is correct".
    _, report, _ = migrate_script(tmp_path, ROUND_ROBIN)
    assert "evaluation DataLoader left unsharded" not in report, report
    assert "DataLoader left unsharded: no loop over it is seen" in report and "DDP040" in report, report
