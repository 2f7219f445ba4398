"""A model's own method that saves, called through the DDP wrapper (``model.save_pretrained(out)``).

The migration reaches the method through ``.module``; the analysis must still see which function that call
runs. A trial's fine-tuning script deadlocked: ``torch.save`` inside the method became ``runtime.save`` (a
barrier on every rank), and the call, no longer resolved through ``model.module``, was taken for a plain
file write and guarded for rank 0, so rank 0 waited alone in the barrier.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

SCRIPT = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def forward(self, x):
        return self.layer(x)

    def save_pretrained(self, folder):
        os.makedirs(folder, exist_ok=True)
        torch.save(self.state_dict(), os.path.join(folder, "model.bin"))


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        model.save_pretrained(f"out/epoch{epoch}")
    model.save_pretrained("out/final")


if __name__ == "__main__":
    main()
'''


def migrate(tmp_path: Path) -> tuple[str, str]:
    text, output, code = migrate_script(tmp_path, SCRIPT)
    assert code == 0, output
    return text, output


def test_a_saving_method_called_through_the_wrapper_runs_on_every_rank(tmp_path: Path) -> None:
    text, _ = migrate(tmp_path)
    assert "runtime.save(self.state_dict()" in text  # rank 0 writes, every rank waits
    assert 'model.module.save_pretrained("out/final")' in text
    assert "is_main_process" not in text  # the call is not kept from the other ranks


@pytest.mark.e2e
@pytest.mark.distributed
def test_the_migrated_saving_method_does_not_hang_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate(tmp_path)
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert (tmp_path / "out" / "final" / "model.bin").exists()


RNN = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 8)
        self.out = nn.Linear(8, 1)

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return weight.new_zeros(1, bsz, 8)

    def forward(self, x, hidden):
        y, hidden = self.rnn(x, hidden)
        return self.out(y), hidden


def main():
    model = RNNModel()
    loader = DataLoader(TensorDataset(torch.randn(16, 5, 4), torch.randn(16, 5, 1)), batch_size=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            hidden = model.init_hidden(x.size(1))
            out, hidden = model(x, hidden)
            opt.zero_grad()
            nn.functional.mse_loss(out, y).backward()
            opt.step()
    print("trained", flush=True)


if __name__ == "__main__":
    main()
'''


def test_a_method_that_runs_no_layer_is_reached_through_module(tmp_path: Path) -> None:
    """``model.init_hidden(bsz)`` in the training step (zeros from ``next(self.parameters())``): a trial got a
    review asking to route it through forward() and an AttributeError on the wrapper; it runs none of the
    model's layers, so ``.module`` is right."""
    from launch import run_python
    from migrated import migrate_script

    migrated, report, code = migrate_script(tmp_path, RNN)
    assert code == 0, report
    assert "hidden = model.module.init_hidden(x.size(1))" in migrated
    assert "trained" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


def test_a_forward_through_module_in_the_training_step_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial's hand-written DDP program called ``model.module(x)`` in its loop: no gradient all-reduce, the
    # ranks' weights drifted apart, and the linter said nothing. Under no_grad (evaluation) it is fine.
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(nn.Linear(4, 3))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in loader:\n"
        "    loss = nn.functional.cross_entropy(model.module(x), y)\n"
        "    with torch.no_grad():\n        pseudo = model.module(x).argmax(1)\n"
        "    opt.zero_grad()\n    (loss + nn.functional.cross_entropy(model(x), pseudo)).backward()\n    opt.step()\n"
    )
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP008", "train.py"])
    findings = [line for line in result.output.splitlines() if "DDP008" in line]
    assert len(findings) == 1 and findings[0].startswith("train.py:8:"), result.output
    assert "model.module(...) in the training step runs the model past DDP's forward" in findings[0]


@pytest.mark.parametrize(
    "step",
    [
        "    nn.functional.cross_entropy(model.module(x), y).backward()\n",
        "    nn.functional.cross_entropy(model.module.forward(x), y).backward()\n",
    ],
)
def test_other_spellings_of_a_forward_past_ddp_are_reported(step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial: the forward written inside the backward call, or through .forward, went unreported (ranks 2.97 / 2.51).
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(nn.Linear(4, 3))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in loader:\n    opt.zero_grad()\n" + step + "    opt.step()\n"
    )
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP008", "train.py"])
    assert "train.py:9:" in result.output and "DDP008" in result.output, result.output


HELPER_BYPASS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(10, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(torch.relu(self.encoder(x)))


def compute_loss(model, x, y):
    return F.cross_entropy(model.head(torch.relu(model.encoder(x))), y)


@torch.no_grad()
def evaluate(model, x, y):
    return F.cross_entropy(model.head(torch.relu(model.encoder(x))), y).item()


def main():
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(64, 10), torch.randint(0, 3, (64,))
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(3):
        for xb, yb in loader:
            loss = compute_loss(model, xb, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    print(evaluate(model, x, y))


if __name__ == "__main__":
    main()
'''


def test_a_helper_that_runs_the_model_s_layers_in_the_training_step_is_left_to_a_human(tmp_path: Path) -> None:
    """A trial's ``compute_loss(model, x, y)`` ran ``model.encoder`` and ``model.head``: the migration read them
    through ``.module``, which runs past DDP's forward (no all-reduce): ranks 8.08 / 9.33 against the
    original's 7.71, with nothing to review. The helper the training step calls is part of it; the same
    reads under ``no_grad`` (evaluation) go through ``.module``."""
    migrated, report, _ = migrate_script(tmp_path, HELPER_BYPASS)
    assert "encoder() in the training step bypasses DDP's forward" in report, report
    assert "head() in the training step bypasses DDP's forward" in report, report
    assert "return F.cross_entropy(model.head(torch.relu(model.encoder(x))), y)\n" in migrated.split("def evaluate")[0]
    helper = migrated.split("def compute_loss")[1].split("def evaluate")[0]
    assert helper.count("TODO(ddp-migrate): this model method runs in the training step") == 1, helper  # (one comment for both)
    assert "model.module.head(torch.relu(model.module.encoder(x)))" in migrated.split("def evaluate")[1]


ALIAS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    model = nn.DataParallel(nn.Sequential(nn.Linear(12, 6), nn.Tanh(), nn.Linear(6, 12)))
    net = model.module
    loader = DataLoader(TensorDataset(torch.randn(64, 12)), batch_size=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(3):
        for (xb,) in loader:
            loss = F.mse_loss(net(xb), xb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        print(F.mse_loss(net(xb), xb).item())


if __name__ == "__main__":
    main()
'''


def test_an_alias_of_the_wrapped_model_trained_on_is_left_to_a_human(tmp_path: Path) -> None:
    """A trial's DataParallel script kept ``net = model.module`` and trained through ``net(x)``: after the
    migration that runs past DDP's forward (ranks 8.52 / 8.25 against 7.82) and the report said nothing."""
    migrated, report, _ = migrate_script(tmp_path, ALIAS)
    assert "net holds model.module, and net(...) in the training step runs the model past DDP's forward" in report, report
    assert report.count("review") >= 1 and "net(...)" in report


def test_an_alias_used_only_without_gradients_is_fine(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, ALIAS.replace("loss = F.mse_loss(net(xb), xb)", "loss = F.mse_loss(model(xb), xb)"))
    assert "net holds model.module" not in report, report


TRAINER_ALIAS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, loader):
        self.model = DistributedDataParallel(model, device_ids=runtime.device_ids())
        self.raw_model = self.model.module
        self.loader = loader
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self, epochs):
        for epoch in range(epochs):
            self.loader.sampler.set_epoch(epoch)
            for x, y in self.loader:
                # TODO(ddp-migrate): this model method runs in the training step: through .module it would skip DDP's gradient all-reduce; call the model (its forward) instead, e.g. make forward() return the loss
                loss = F.mse_loss(self.raw_model(x), y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()


def main():
    runtime.setup()
    torch.manual_seed(0)
    train_dataset = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = DataLoader(
        train_dataset,
        batch_size=runtime.per_process_batch_size(8),
        sampler=DistributedSampler(train_dataset, shuffle=False),
    )
    Trainer(nn.Linear(4, 1), loader).fit(2)
    runtime.cleanup()


if __name__ == "__main__":
    main()
'''


def test_an_attribute_alias_of_the_wrapped_model_trained_on_is_left_to_a_human(tmp_path: Path) -> None:
    """``self.raw_model = self.model.module`` in a Trainer's ``__init__`` and ``self.raw_model(x)`` in its
    training loop: the same forward past DDP, through an attribute (the previous session's note listed it)."""
    _, report, _ = migrate_script(tmp_path, TRAINER_ALIAS)
    assert "self.raw_model holds self.model.module, and self.raw_model(...) in the training step" in report, report


def test_a_helper_called_without_gradients_in_the_step_goes_through_module(tmp_path: Path) -> None:
    """``with torch.no_grad(): f = features(model, x)`` in the training step: no gradient goes through it, so
    ``.module`` is right (a review found it reviewed)."""
    source = HELPER_BYPASS.replace(
        "            loss = compute_loss(model, xb, yb)\n",
        "            with torch.no_grad():\n                f = compute_loss(model, xb, yb)\n            loss = F.cross_entropy(model(xb), yb) + 0.0 * f\n",
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "bypasses DDP's forward" not in report, report
    assert "model.module.head(torch.relu(model.module.encoder(x)))" in migrated.split("def compute_loss")[1].split("def evaluate")[0]


def test_a_helper_in_another_module_that_the_step_calls_is_left_to_a_human(tmp_path: Path) -> None:
    """The helper in ``utils.py`` (a review found it rewritten to ``.module`` with no review: -0.130 against -0.109)."""
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    helper = "import torch\nimport torch.nn.functional as F\n\n\ndef compute_loss(model, x, y):\n    return F.cross_entropy(model.head(torch.relu(model.encoder(x))), y)\n"
    (tmp_path / "utils.py").write_text(helper)
    (tmp_path / "train.py").write_text(HELPER_BYPASS.replace("def compute_loss(model, x, y):\n    return F.cross_entropy(model.head(torch.relu(model.encoder(x))), y)\n", "from utils import compute_loss\n"))
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    assert "utils.py" in result.output and "encoder() in the training step bypasses DDP's forward" in result.output, result.output


@pytest.mark.parametrize(
    ("alias", "step"),
    [
        ("net = model.module if isinstance(model, nn.DataParallel) else model", "net(xb)"),
        ('net = getattr(model, "module", model)', "net(xb)"),
    ],
    ids=["isinstance-conditional", "getattr"],
)
def test_other_spellings_of_an_alias_trained_on_are_left_to_a_human(tmp_path: Path, alias: str, step: str) -> None:
    """A review found these silent (0.051 against -0.034): the alias written as a conditional or getattr."""
    source = ALIAS.replace("    net = model.module\n", f"    {alias}\n").replace("loss = F.mse_loss(net(xb), xb)", f"loss = F.mse_loss({step}, xb)")
    _, report, _ = migrate_script(tmp_path, source)
    assert "in the training step runs the model past DDP's forward" in report, report


def test_the_inner_model_handed_to_a_helper_that_runs_it_in_the_step_is_left_to_a_human(tmp_path: Path) -> None:
    """``compute_loss(model.module, x, y)`` of a DataParallel script: after the migration the helper runs the
    model past DDP's forward (the previous session's note and a review listed it as missed)."""
    source = HELPER_BYPASS.replace("    model = Net()\n", "    model = nn.DataParallel(Net())\n").replace(
        "loss = compute_loss(model, xb, yb)", "loss = compute_loss(model.module, xb, yb)"
    ).replace("print(evaluate(model, x, y))", "print(evaluate(model.module, x, y))")
    _, report, _ = migrate_script(tmp_path, source)
    assert "model.module handed to compute_loss(), which runs it in the training step" in report, report
    assert "evaluate()" not in report


STEP_HELPER = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Linear(8, 8)

    def embed(self, x):
        return self.f(x)

    def forward(self, x):
        return self.embed(x)


STEP


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16)
    model = WRAP
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for (x,) in loader:
            CALL


if __name__ == "__main__":
    main()
'''

FUNCTION_STEP = """def step(model, opt, x):
    loss = EMBED(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()"""

METHOD_STEP = """class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def step(self, x):
        loss = EMBED(x).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()"""


@pytest.mark.parametrize(
    "step, call, embed, wrap",
    [
        (FUNCTION_STEP, "step(model, opt, x)", "model.embed", "Net()"),
        (METHOD_STEP, "Trainer(model, opt).step(x)", "self.model.embed", "Net()"),
        (METHOD_STEP, "Trainer(model, opt).step(x)", "self.model.module.embed", "nn.DataParallel(Net())"),
    ],
    ids=["step_function", "trainer_method", "data_parallel_module"],
)
def test_a_model_method_in_a_step_helper_runs_through_ddps_forward(tmp_path: Path, step: str, call: str, embed: str, wrap: str) -> None:
    """A trial's silent drift: the step helper holds backward() but not the loop, so ``model.embed(x)`` there became
    ``model.module.embed(x)`` (or kept it) with no review, and the ranks' weights parted (-1.061 against -1.690)."""
    source = STEP_HELPER.replace("STEP", step.replace("EMBED", embed)).replace("CALL", call).replace("WRAP", wrap)
    migrated, report, code = migrate_script(tmp_path, source)
    if ".module." in embed:  # (the program's own ``.module``: a human routes it through the forward)
        assert "DDP008" in report and "embed() " in report and "bypasses DDP's forward" in report and code == 1, report
        assert "# TODO(ddp-migrate): this model method runs in the training step" in migrated, migrated
        return
    # The program's model method runs inside DDP's own forward, which all-reduces its gradients.
    assert "embed() runs through DDP's forward (runtime.call_through_ddp)" in report and code == 0, report
    receiver = embed.rsplit(".", 1)[0]
    assert f'loss = runtime.call_through_ddp({receiver}, "embed", x).pow(2).mean()' in migrated, migrated
