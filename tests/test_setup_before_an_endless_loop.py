"""minGPT's ``Trainer.run`` (a trial): ``self.optimizer = model.configure_optimizers(config)``, then a ``while True:``
loop that draws ``next(data_iter)``, runs ``backward()`` and steps the optimizer. The call runs once, before the
training: DDP008 read it as part of a training step, left it on the DDP wrapper (``AttributeError`` under torchrun)
and told the user to route it through ``forward()``."""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

PROGRAM = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)

    def configure_optimizers(self, lr):
        decay, no_decay = set(), set()
        for mn, m in self.named_modules():
            for pn, p in m.named_parameters():
                full = f"{mn}.{pn}" if mn else pn
                if pn.endswith("weight") and isinstance(m, nn.Linear):
                    decay.add(full)
                else:
                    no_decay.add(full)
        params = dict(self.named_parameters())
        groups = [
            {"params": [params[n] for n in sorted(decay)], "weight_decay": 0.1},
            {"params": [params[n] for n in sorted(no_decay)], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=lr)


class Trainer:
    def __init__(self, model, dataset):
        self.model = model
        self.dataset = dataset

    def run(self, max_iters):
        model = self.model
        self.optimizer = model.configure_optimizers(0.1)
        loader = DataLoader(self.dataset, batch_size=8, shuffle=True)
        data_iter = iter(loader)
        it = 0
        while True:
            try:
                (x,) = next(data_iter)
            except StopIteration:
                data_iter = iter(loader)
                (x,) = next(data_iter)
            loss = model(x).mean()
            model.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            it += 1
            if it >= max_iters:
                break


if __name__ == "__main__":
    Trainer(Net(), TensorDataset(torch.randn(32, 4))).run(8)
"""


def test_a_set_up_before_an_endless_training_loop_goes_through_module(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, PROGRAM)
    assert "self.optimizer = model.module.configure_optimizers(0.1)" in text, report + text
    assert "route it through the model's forward" not in report, report


def test_a_trained_name_of_another_function_is_not_the_model(tmp_path: Path) -> None:
    # (a trial: ``m = self.mlp`` in ``__init__`` was taken for the ``m`` of ``configure_optimizers``' loop, and the
    # wrap went into ``__init__``, around the sub-module: the model itself trained unwrapped)
    source = PROGRAM.replace(
        "        self.fc = nn.Linear(4, 1)\n",
        "        self.fc = nn.Linear(4, 1)\n        m = self.fc\n        self.head = lambda x: m(x)\n",
    ).replace("        for mn, m in self.named_modules():", "        for mn, m in [('', self)]:")
    text, report, code = migrate_script(tmp_path, source)
    assert "m = DistributedDataParallel" not in text and "m.module" not in text, text


def test_a_model_a_closure_builds_the_optimizer_for_is_wrapped_where_it_is_built(tmp_path: Path) -> None:
    # (a review: with the optimizer built in ``def make_optimizer()`` inside ``main()``, the model went unwrapped)
    source = (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
        "def main():\n    model = nn.Linear(4, 1)\n\n    def make_optimizer():\n"
        "        return torch.optim.SGD(model.parameters(), lr=0.1)\n\n    opt = make_optimizer()\n"
        "    loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8)\n    for (x,) in loader:\n"
        "        opt.zero_grad()\n        model(x).mean().backward()\n        opt.step()\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    text, report, code = migrate_script(tmp_path, source)
    assert code == 0 and "model = DistributedDataParallel(model, device_ids=runtime.device_ids())" in text, report + text
