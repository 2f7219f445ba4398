"""Loops shared by training and evaluation, where what runs in the loop depends on the caller: sibling
classes (a ``Trainer`` and an ``Evaluator`` of one base, each storing its own ``self.loader``), a base
class's ``run(loader)`` calling ``self.step`` that one subclass overrides to train and another to evaluate,
and ``run(model, opt, loader, step_fn)`` given ``train_step`` at one call site and ``eval_step`` at
another. The training loader is sharded; the evaluation loader stays whole, so every rank evaluates all
16 samples (a review of the analysis: the evaluation loader was sharded, "evaluated 8 of 16").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script, train_original_and_migrated

SIBLINGS = 'import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\nclass Runner:\n    def log(self, msg):\n        print(msg)\n\n\nclass Trainer(Runner):\n    def __init__(self, model, loader, opt):\n        self.model, self.loader, self.opt = model, loader, opt\n\n    def train_epoch(self):\n        self.model.train()\n        for x, y in self.loader:\n            self.opt.zero_grad()\n            nn.functional.mse_loss(self.model(x), y).backward()\n            self.opt.step()\n\n\nclass Evaluator(Runner):\n    def __init__(self, model, loader):\n        self.model, self.loader = model, loader\n\n    def evaluate(self):\n        self.model.eval()\n        total, n = 0.0, 0\n        with torch.no_grad():\n            for x, y in self.loader:\n                total += nn.functional.mse_loss(self.model(x), y, reduction="sum").item()\n                n += len(x)\n        return n\n\n\ndef main():\n    torch.manual_seed(0)\n    model = nn.Linear(4, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n    val_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)\n    trainer = Trainer(model, train_loader, opt)\n    evaluator = Evaluator(model, val_loader)\n    for epoch in range(2):\n        trainer.train_epoch()\n        print(f"epoch {epoch}: evaluated {evaluator.evaluate()} of 16 samples")\n\n\nif __name__ == "__main__":\n    main()\n'

OVERRIDES = 'import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\nclass Loop:\n    def __init__(self, model):\n        self.model = model\n\n    def run(self, loader):\n        total, n = 0.0, 0\n        for x, y in loader:\n            total += self.step(x, y)\n            n += len(x)\n        return n\n\n    def step(self, x, y):\n        raise NotImplementedError\n\n\nclass TrainLoop(Loop):\n    def __init__(self, model, opt):\n        super().__init__(model)\n        self.opt = opt\n\n    def step(self, x, y):\n        self.opt.zero_grad()\n        loss = nn.functional.mse_loss(self.model(x), y)\n        loss.backward()\n        self.opt.step()\n        return loss.item()\n\n\nclass EvalLoop(Loop):\n    def step(self, x, y):\n        with torch.no_grad():\n            return nn.functional.mse_loss(self.model(x), y).item()\n\n\ndef main():\n    torch.manual_seed(0)\n    model = nn.Linear(4, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n    val_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)\n    train, evaluate = TrainLoop(model, opt), EvalLoop(model)\n    for epoch in range(2):\n        train.run(train_loader)\n        print(f"epoch {epoch}: evaluated {evaluate.run(val_loader)} of 16 samples")\n\n\nif __name__ == "__main__":\n    main()\n'

STEP_FUNCTIONS = 'import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef train_step(model, opt, x, y):\n    opt.zero_grad()\n    nn.functional.mse_loss(model(x), y).backward()\n    opt.step()\n    return len(x)\n\n\ndef eval_step(model, opt, x, y):\n    with torch.no_grad():\n        model(x)\n    return len(x)\n\n\ndef run(model, opt, loader, step_fn):\n    n = 0\n    for x, y in loader:\n        n += step_fn(model, opt, x, y)\n    return n\n\n\ndef main():\n    torch.manual_seed(0)\n    model = nn.Linear(4, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    train_loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)\n    val_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)\n    for epoch in range(2):\n        trained = run(model, opt, train_loader, train_step)\n        evaluated = run(model, opt, val_loader, eval_step)\n        print(f"epoch {epoch}: trained on {trained}, evaluated {evaluated} of 16")\n\n\nif __name__ == "__main__":\n    main()\n'


@pytest.mark.parametrize("source", [SIBLINGS, OVERRIDES, STEP_FUNCTIONS], ids=["siblings", "overrides", "step-functions"])
def test_only_the_loader_the_shared_loop_trains_on_is_sharded(tmp_path: Path, source: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DDP005" in report and "cannot tell whether it trains" not in report, report
    train_line = next(line for line in migrated.splitlines() if "train_loader = DataLoader(" in line)
    assert "DistributedSampler(" in migrated.split("train_loader = DataLoader(")[1].split("val_loader")[0], migrated
    assert "DistributedSampler" not in migrated.split("val_loader = DataLoader(")[1].split("\n")[0], migrated
    assert train_line


@pytest.mark.distributed
def test_every_rank_evaluates_the_whole_set_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    _, _, launch = train_original_and_migrated(tmp_path, OVERRIDES)
    assert "epoch 1: evaluated 16 of 16 samples" in launch.output, launch.output
