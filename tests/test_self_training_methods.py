"""A model method that runs the model's own training step, called on the wrapped model.

``model.fit(loader, optimizer)`` of ``def fit(self, loader, optimizer): ... self(x) ... loss.backward();
optimizer.step()``, the optimizer built outside the class: the migration wrapped the model and called
``model.module.fit(...)``. The forward then runs on the inner module, never through DDP's forward, so no
gradient is all-reduced and every process trains its own replica, while the report said nothing needed a
human. Such a call is now left to a human, with a TODO at the call and a review line; a method that only runs
the model (a prediction) or takes gradients without stepping an optimizer (a saliency map) still goes through
``.module``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

HEAD = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)
'''

METHODS = {
    "fit": '''
    def fit(self, loader, optimizer, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(self(x), y)
                loss.backward()
                optimizer.step()
        return loss.item()
''',
    "train_step": '''
    def train_step(self, x, y, opt):
        opt.zero_grad()
        loss = self.loss(x, y)
        loss.backward()
        opt.step()
        return loss.item()

    def loss(self, x, y):
        return nn.functional.mse_loss(self.fc(x), y)
''',
    "predict": '''
    def predict(self, x):
        with torch.no_grad():
            return self(x)
''',
    "saliency": '''
    def saliency(self, x):
        x = x.clone().requires_grad_(True)
        self(x).sum().backward()
        return x.grad.abs()
''',
}

MAIN = '''

def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
{body}
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
'''

#: How ``main`` uses each method, and the call the migration must leave to a human (``None``: none).
USES = {
    "fit": ("    final = model.fit(loader, optimizer, 2)\n    print(final)", "final = model.fit(loader, optimizer, 2)"),
    "train_step": (
        "    for epoch in range(2):\n        for x, y in loader:\n            model.train_step(x, y, optimizer)",
        "model.train_step(x, y, optimizer)",
    ),
    "predict": (
        "    for epoch in range(2):\n        for x, y in loader:\n            optimizer.zero_grad()\n"
        "            nn.functional.mse_loss(model(x), y).backward()\n            optimizer.step()\n"
        "    print(model.predict(x))",
        None,
    ),
    "saliency": (
        "    for epoch in range(2):\n        for x, y in loader:\n            optimizer.zero_grad()\n"
        "            nn.functional.mse_loss(model(x), y).backward()\n            optimizer.step()\n"
        "    print(model.saliency(x))",
        None,
    ),
}


def program(method: str) -> str:
    """The model class with one more method, and a ``main`` that uses it."""
    body, _ = USES[method]
    return HEAD + METHODS[method] + MAIN.format(body=body)


@pytest.mark.parametrize("method", ["fit", "train_step"])
def test_a_method_that_trains_the_model_itself_is_left_to_a_human(tmp_path: Path, method: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, program(method))
    call = USES[method][1]
    assert call is not None
    assert f"model.module.{method}(" not in migrated, migrated
    before_call = migrated.split(call)[0].rstrip().splitlines()
    assert "TODO(ddp-migrate)" in before_call[-1] and "own training step" in before_call[-1], migrated
    assert f"{method}() runs a training step of the model itself" in report, report
    assert "0 item(s) need a human" not in report, report


@pytest.mark.parametrize("method", ["predict", "saliency"])
def test_a_method_that_steps_no_optimizer_goes_through_module(tmp_path: Path, method: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, program(method))
    assert f"(model.module.{method}(x))" in migrated, migrated
    assert "own training step" not in migrated and "a training step of the model itself" not in report, report


def test_the_method_of_a_class_in_another_module_is_left_to_a_human_too(tmp_path: Path) -> None:
    """The model's class in ``model.py``, its ``fit`` called from ``train.py``: the program's call graph finds it."""
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    source = program("fit")
    classes, main = source.split("\n\ndef main():")
    (tmp_path / "model.py").write_text(classes)
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "from model import Net\n\n\ndef main():" + main
    )
    report = CliRunner().invoke(cli, [str(tmp_path)], catch_exceptions=False).output
    migrated = (tmp_path / "train.py").read_text()
    assert "model.module.fit(" not in migrated and "fit() runs a training step of the model itself" in report, report


ATTACK = '''
    def attack(self, x, y, steps=3):
        delta = torch.zeros_like(x, requires_grad=True)
        opt = torch.optim.Adam([delta], lr=0.01)
        for _ in range(steps):
            loss = -nn.functional.mse_loss(self(x + delta), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return (x + delta).detach()
'''


def test_a_method_that_steps_an_optimizer_over_an_input_goes_through_module(tmp_path: Path) -> None:
    """A review's adversarial attack (``Adam([delta])`` over the input, after training): it steps no parameter of
    the model, so ``model.module.attack(x, y)`` is right; a TODO left the call on the wrapper (AttributeError)."""
    body = USES["predict"][0].replace("print(model.predict(x))", "print(model.attack(x, y).sum())")
    source = HEAD + ATTACK + MAIN.format(body=body)
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "print0(model.module.attack(x, y).sum())" in migrated, migrated
    assert "a training step of the model itself" not in report, report
