"""The model reached through a container or by name (``getattr``/``hasattr``) once it is wrapped.

A trial's silent wrong migrations, each with "0 item(s) need a human":

- ``torch.save(state["model"].state_dict(), ...)`` of a callback handed ``state = {"model": model}`` (or
  ``models[0]`` of a list) saved ``module.``-prefixed keys once the model was wrapped, even in a plain run;
- ``model.config if hasattr(model, "config") else {}`` became ``model.module.config if hasattr(model,
  "config") else {}``: the wrapper has no ``config``, so the checkpoint's config was saved empty;
- ``getattr(model, "config")`` failed with AttributeError on the wrapper.
"""

from __future__ import annotations

from pathlib import Path

import torch

from launch import run_python
from migrated import migrate_script

PROGRAM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = {"hidden": 8}
        self.fc = nn.Linear(10, 3)

    def forward(self, x):
        return self.fc(x)


class SaveBest:
    def on_epoch_end(self, state):
        torch.save(state["model"].state_dict(), "best.pt")


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 10), torch.randint(0, 3, (64,))), batch_size=16, shuffle=True)
    saver, state, models = SaveBest(), {"model": model}, [model]
    for epoch in range(2):
        for x, y in loader:
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        saver.on_epoch_end(state)
        torch.save(models[0].state_dict(), "last.pt")
    cfg = model.config if hasattr(model, "config") else {}
    print("config", getattr(model, "config")["hidden"], cfg, hasattr(model, "training"), flush=True)
    torch.save({"config": cfg}, "final.pt")


if __name__ == "__main__":
    main()
'''


def test_a_wrapped_model_reached_through_a_container_or_by_name_is_the_model(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM)
    assert code == 0, report
    assert 'runtime.unwrap(state["model"]).state_dict()' in migrated and "runtime.unwrap(models[0]).state_dict()" in migrated, migrated
    assert 'hasattr(runtime.unwrap(model), "config")' in migrated and 'getattr(runtime.unwrap(model), "config")' in migrated, migrated
    assert 'hasattr(model, "training")' in migrated, migrated  # (the wrapper has it too)
    output = run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
    assert "config 8 {'hidden': 8} True" in output, output
    for name in ("best.pt", "last.pt"):
        assert sorted(torch.load(tmp_path / name)) == ["fc.bias", "fc.weight"], name
    assert torch.load(tmp_path / "final.pt")["config"] == {"hidden": 8}
