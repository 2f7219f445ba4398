"""Training steps reached through calls the analysis once could not follow: a step function returned by a
factory (``step = make_train_step(model, opt)``), bound with ``functools.partial``, defined inside
``main``, stored by an engine in ``self.process_fn``, or a ``training_step`` a subclass overrides and its
base class's ``fit`` calls. The loop over the loader did not seem to train: the loader was left whole
(every rank trained on the whole set, a trial: 64 of 64 samples on each rank) and the report said nothing
needed a human. Functions are now values of the binding model, and ``self.method()`` runs the
overrides of the classes derived from the class.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script, train_original_and_migrated

HEAD = '''
import functools
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

'''

DATA = '''
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1), torch.arange(64)), batch_size=8)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
'''

TAIL = '''
    sys.stderr.write(f"distinct {len(SEEN)}\\\\n")
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''

FACTORY = HEAD + '''SEEN = set()


def make_train_step(model, optimizer):
    def step(x, y):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return step


def main():''' + DATA + '''    step = make_train_step(model, optimizer)
    for epoch in range(2):
        for x, y, index in loader:
            SEEN.update(index.tolist())
            step(x, y)''' + TAIL

PARTIAL = HEAD + '''SEEN = set()


def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


def main():''' + DATA + '''    step = functools.partial(train_step, model, optimizer)
    for epoch in range(2):
        for x, y, index in loader:
            SEEN.update(index.tolist())
            step(x, y)''' + TAIL

NESTED = HEAD + '''SEEN = set()


def main():''' + DATA + '''
    def step(x, y):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    for epoch in range(2):
        for x, y, index in loader:
            SEEN.update(index.tolist())
            step(x, y)''' + TAIL

ENGINE = HEAD + '''SEEN = set()


class Engine:
    def __init__(self, process_fn):
        self.process_fn = process_fn

    def run(self, loader, epochs):
        for epoch in range(epochs):
            for batch in loader:
                self.process_fn(batch)


def main():''' + DATA + '''
    def update(batch):
        x, y, index = batch
        SEEN.update(index.tolist())
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    Engine(update).run(loader, 2)''' + TAIL

SUBCLASS = HEAD + '''SEEN = set()


class BaseTrainer:
    def __init__(self, model, loader, epochs):
        self.model, self.loader, self.epochs = model, loader, epochs

    def training_step(self, batch):
        raise NotImplementedError

    def fit(self):
        for epoch in range(self.epochs):
            for batch in self.loader:
                self.training_step(batch)


class RegressionTrainer(BaseTrainer):
    def __init__(self, model, loader, epochs, optimizer):
        super().__init__(model, loader, epochs)
        self.optimizer = optimizer

    def training_step(self, batch):
        x, y, index = batch
        SEEN.update(index.tolist())
        self.optimizer.zero_grad()
        nn.functional.mse_loss(self.model(x), y).backward()
        self.optimizer.step()


def main():''' + DATA + '''    RegressionTrainer(model, loader, 2, optimizer).fit()''' + TAIL


@pytest.mark.parametrize("source", [FACTORY, PARTIAL, NESTED, ENGINE, SUBCLASS], ids=["factory", "partial", "nested", "engine", "subclass"])
def test_a_loader_whose_loop_trains_through_a_function_value_is_sharded(tmp_path: Path, source: str) -> None:
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "sampler=DistributedSampler(" in migrated and "set_epoch(epoch)" in migrated, migrated
    assert "evaluation DataLoader left unsharded" not in report, report


def test_a_subclass_with_no_override_leaves_an_evaluating_loop_alone(tmp_path: Path) -> None:
    """The base class's loop runs ``self.evaluate_step``, which no class of the program makes train: the
    loader it iterates stays whole, as before."""
    source = SUBCLASS.replace("def training_step(self, batch):\n        x, y", "def evaluate_step(self, batch):\n        x, y")
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DistributedSampler(" not in migrated.split("def main")[1].split("RegressionTrainer(")[0], migrated


@pytest.mark.distributed
@pytest.mark.parametrize("source", [ENGINE, SUBCLASS], ids=["engine", "subclass"])
def test_a_step_run_through_an_engine_or_an_override_trains_sharded(tmp_path: Path, source: str) -> None:
    """Under torchrun with 2 processes each rank trains on its own 32 of the 64 samples, and the weights
    are the original's (a batch of 8 is 4 per rank, averaged by DDP)."""
    torch = pytest.importorskip("torch")
    original, migrated, launch = train_original_and_migrated(tmp_path, source)
    assert launch.output.count("distinct 32") == 2, launch.output
    expected = torch.load(original / "final.pt", weights_only=True)
    actual = torch.load(migrated / "final.pt", weights_only=True)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], atol=1e-6, rtol=0)


TABLE = FACTORY.replace("    step = make_train_step(model, optimizer)\n", '    steps = {"train": make_train_step(model, optimizer)}\n').replace(
    "            step(x, y)", '            steps["train"](x, y)'
)
HOOKS = FACTORY.replace("    step = make_train_step(model, optimizer)\n", "    hooks = [make_train_step(model, optimizer)]\n").replace(
    "            step(x, y)", "            for hook in hooks:\n                hook(x, y)"
)


@pytest.mark.parametrize("source", [TABLE, HOOKS], ids=["table", "list"])
def test_a_step_taken_from_a_table_or_a_list_of_functions_trains(tmp_path: Path, source: str) -> None:
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0 and "sampler=DistributedSampler(" in migrated, report


def test_a_step_the_analysis_cannot_follow_is_left_to_a_human(tmp_path: Path) -> None:
    """``operator.methodcaller("training_step", batch)(self)``: no loop is known to reach ``backward()``, so
    whether the loader trains cannot be told: a review at the loader, not a loader left whole in silence."""
    source = "import operator\n" + SUBCLASS.replace("self.training_step(batch)", 'operator.methodcaller("training_step", batch)(self)')
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 1, report
    assert "DDP005 DataLoader iterated by a loop that the analysis cannot connect to the program's backward()" in report, report
    assert "if this loader trains, shard it" in migrated


@pytest.mark.parametrize("lookup", ['getattr(self, "training_step")', "getattr(self, self.step_name)"], ids=["literal", "by-name"])
def test_a_step_looked_up_by_name_trains_sharded(tmp_path: Path, lookup: str) -> None:
    """``getattr(self, "training_step")(batch)`` runs the method of that name; with a name the analysis
    cannot read, any method of the object a call with that many arguments can run (an mmcv-style runner
    calls its hooks so)."""
    source = SUBCLASS.replace("self.training_step(batch)", f"{lookup}(batch)")
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "DistributedSampler added to the training DataLoader" in report, report


SLICED = 'import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef main():\n    torch.manual_seed(0)\n    x_train, y_train = torch.randn(64, 4), torch.randn(64, 1)\n    val_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)\n    model = nn.Linear(4, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for epoch in range(2):\n        model.train()\n        for i in range(0, 64, 8):\n            opt.zero_grad()\n            nn.functional.mse_loss(model(x_train[i:i + 8]), y_train[i:i + 8]).backward()\n            opt.step()\n        model.eval()\n        with torch.no_grad():\n            val = 0.0\n            for x, y in val_loader:\n                val += nn.functional.mse_loss(model(x), y, reduction="sum").item() / 16\n        print(f"epoch {epoch} val {val:.4f}")\n\n\nif __name__ == "__main__":\n    main()\n'


def test_a_backward_in_a_loop_over_slices_still_asks_for_sharding(tmp_path: Path) -> None:
    """Training on hand-sliced tensors, evaluation over a DataLoader: the backward's loop is known, so the
    training data is what DDP040 reviews, and the evaluation loader is left whole with its note."""
    _, report, _ = migrate_script(tmp_path, SLICED)
    assert "DDP040 training batches here come from no DataLoader" in report, report
    assert "cannot connect" not in report and "evaluation DataLoader left unsharded" in report, report


FILTERED = FACTORY.replace("        for x, y, index in loader:", "        for x, y, index in (b for b in loader if len(b[0]) == 8):")


def test_a_loop_over_a_generator_that_filters_the_loader_trains_on_it(tmp_path: Path) -> None:
    """``for x, y in (b for b in loader if ...)``: the loader trains (a review said the batches came from no
    DataLoader, and the generator was then taken for a pass that does not train)."""
    migrated, report, code = migrate_script(tmp_path, FILTERED)
    assert code == 0 and "sampler=DistributedSampler(" in migrated and "set_epoch(epoch)" in migrated, report


DISPATCH = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Runner:
    def __init__(self, model, opt, train_loader, val_loader):
        self.model, self.opt = model, opt
        self.train_loader, self.val_loader = train_loader, val_loader

    def dispatch(self, event, arg):
        return getattr(self, event)(arg)

    def train_one(self, loader):
        for x, y in loader:
            self.opt.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            self.opt.step()

    def validate(self, loader):
        with torch.no_grad():
            return sum(nn.functional.mse_loss(self.model(x), y).item() for x, y in loader)

    def fit(self, epochs):
        for epoch in range(epochs):
            self.train_one(self.train_loader)
            print(self.dispatch("validate", self.val_loader))


def main():
    model = nn.Linear(4, 1)
    train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    val_loader = DataLoader(TensorDataset(torch.randn(20, 4), torch.randn(20, 1)), batch_size=10)
    Runner(model, torch.optim.SGD(model.parameters(), lr=0.1), train_loader, val_loader).fit(2)


if __name__ == "__main__":
    main()
'''


def test_a_method_looked_up_by_a_name_its_callers_spell_runs_that_method_only(tmp_path: Path) -> None:
    """``getattr(self, event)(arg)`` with ``event`` given as ``"validate"``: a review found every one-argument
    method bound to the validation loader, which was then sharded as a training loader."""
    migrated, report, _ = migrate_script(tmp_path, DISPATCH)
    assert report.count("DistributedSampler added to the training DataLoader") == 1, report
    assert "val_loader = DataLoader(TensorDataset(torch.randn(20, 4), torch.randn(20, 1)), batch_size=10)" in migrated
