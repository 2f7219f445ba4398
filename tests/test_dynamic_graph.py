"""A model that skips layers on some steps, through a real migration and a torchrun run.

LayerDrop (``if self.training and torch.rand(()) < p: continue`` in ``forward``) leaves some parameters
without a gradient on some steps. DataParallel never minded; DDP fails at the next step ("Expected to have
finished reduction in the prior iteration") unless it looks for unused parameters. A trial's migrated script
crashed so while the report said nothing: the wrap the migration writes now passes
``find_unused_parameters=True`` for such a model, and says why.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script
from click.testing import CliRunner
from ddp_migrate.cli import cli

SCRIPT = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff = nn.Linear(8, 8)

    def forward(self, h):
        return h + self.ff(h)


class DeepNet(nn.Module):
    def __init__(self, layerdrop):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.out = nn.Linear(8, 1)
        self.layerdrop = layerdrop

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            if self.training and torch.rand(()) < self.layerdrop:
                continue
            h = block(h)
        return self.out(h)


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(128, 4), torch.randn(128, 1)), batch_size=8, shuffle=True)
    model = DeepNet(layerdrop=0.5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''


def migrate(tmp_path: Path, source: str) -> tuple[str, str]:
    text, output, code = migrate_script(tmp_path, source)
    assert code == 0, output
    return text, output


def test_the_wrap_of_a_model_that_skips_layers_looks_for_unused_parameters(tmp_path: Path) -> None:
    text, output = migrate(tmp_path, SCRIPT)
    assert "find_unused_parameters=True" in text
    assert "with find_unused_parameters=True: its forward() calls `block` only on some steps" in output
    assert "DDP032" not in output  # the flag it asks to remove is needed here


def test_a_layer_under_a_test_of_the_models_settings_needs_no_search(tmp_path: Path) -> None:
    # ResNet's ``if self.downsample is not None``: the same on every step, every parameter gets a gradient.
    source = SCRIPT.replace("if self.training and torch.rand(()) < self.layerdrop:", "if self.layerdrop is None:")
    text, _ = migrate(tmp_path, source)
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text




LEFTOVER = SCRIPT.replace(
    "        self.out = nn.Linear(8, 1)\n",
    "        self.out = nn.Linear(8, 1)\n        self.old_out = nn.Linear(8, 1)  # left from an earlier experiment\n",
).replace("if self.training and torch.rand(()) < self.layerdrop:", "if self.layerdrop is None:")


def test_the_wrap_of_a_model_with_a_layer_nothing_uses_looks_for_unused_parameters(tmp_path: Path) -> None:
    """A layer the model keeps but never calls (a trial: DDP crashed at step 2, the report said nothing)."""
    text, output = migrate(tmp_path, LEFTOVER)
    assert "find_unused_parameters=True" in text
    assert "`self.old_out` (nn.Linear) is never used" in output


def test_a_layer_used_outside_forward_is_no_unused_layer(tmp_path: Path) -> None:
    source = LEFTOVER.replace("        return self.out(h)\n", "        return self.out(h)\n\n    def project(self, h):\n        return self.old_out(h)\n")
    text, _ = migrate(tmp_path, source)
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text



#: A block skipped on odd calls by a counter ``forward()`` bumps, and one the training loop switches off for
#: the first epoch through a flag of the model (a trial's crashes: ``self.X`` was read as a setting).
COUNTER = SCRIPT.replace(
    "        self.layerdrop = layerdrop\n", "        self.layerdrop = layerdrop\n        self.calls = 0\n"
).replace(
    "        h = self.inp(x)\n", "        h = self.inp(x)\n        self.calls += 1\n"
).replace("if self.training and torch.rand(()) < self.layerdrop:", "if self.calls % 2 == 0:")
FLAG = SCRIPT.replace(
    "        self.layerdrop = layerdrop\n", "        self.layerdrop = layerdrop\n        self.skip_first = False\n"
).replace("if self.training and torch.rand(()) < self.layerdrop:", "if self.skip_first:").replace(
    "    for epoch in range(2):\n", "    for epoch in range(2):\n        model.skip_first = epoch == 0\n"
)


@pytest.mark.parametrize("source", [COUNTER, FLAG], ids=["counter", "flag"])
def test_a_layer_under_a_test_of_an_attribute_set_between_steps_looks_for_unused_parameters(tmp_path: Path, source: str) -> None:
    text, output = migrate(tmp_path, source)
    assert "find_unused_parameters=True" in text, output
    assert "its forward() calls `block` only on some steps" in output, output


@pytest.mark.e2e
@pytest.mark.distributed
@pytest.mark.parametrize("source", [SCRIPT, LEFTOVER, COUNTER, FLAG], ids=["layerdrop", "leftover-layer", "counter", "flag"])
def test_the_migrated_model_trains_under_torchrun(tmp_path: Path, source: str) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate(tmp_path, source)
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert (tmp_path / "final.pt").exists()


OUTPUT_DROPPED = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class AE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(12, 6)
        self.dec = nn.Linear(6, 12)
        self.cls = nn.Linear(6, 2)

    def forward(self, x):
        z = torch.tanh(self.enc(x))
        return self.dec(z), self.cls(z)


def main():
    torch.manual_seed(0)
    model = AE()
    loader = DataLoader(TensorDataset(torch.randn(64, 12), torch.randint(0, 2, (64,))), batch_size=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(2):
        for step, (xb, yb) in enumerate(loader):
            recon, logits = model(xb)
            loss = F.mse_loss(recon, xb)
            USE
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    "use",
    ["if step % 2 == 0:\n                loss = loss + F.cross_entropy(logits, yb)", "if step % 2 == 0:\n                print(logits.mean())"],
    ids=["some-steps", "only-printed"],
)
def test_an_output_of_forward_the_step_uses_on_some_steps_looks_for_unused_parameters(tmp_path: Path, use: str) -> None:
    """A trial's autoencoder added the classifier's loss on even steps only: the migrated program failed with
    "Expected to have finished reduction in the prior iteration" (plain python and torchrun), and the
    report said nothing. The classifier gets no gradient on the other steps."""
    text, report = migrate(tmp_path, OUTPUT_DROPPED.replace("USE", use))
    assert "find_unused_parameters=True" in text, text
    assert "the training step uses `logits`, an output of its forward(), only on some steps" in report, report


def test_an_output_used_on_every_step_needs_no_search(tmp_path: Path) -> None:
    text, _ = migrate(tmp_path, OUTPUT_DROPPED.replace("USE", "loss = loss + 0.1 * F.cross_entropy(logits, yb)"))
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text


@pytest.mark.e2e
@pytest.mark.distributed
def test_the_migrated_model_with_an_output_used_on_some_steps_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate(tmp_path, OUTPUT_DROPPED.replace("USE", "if step % 2 == 0:\n                loss = loss + F.cross_entropy(logits, yb)"))
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert (tmp_path / "final.pt").exists()


HEAD_BY_TASK = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class MultiTask(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 1), "b": nn.Linear(8, 1)})

    def forward(self, x, task):
        h = torch.relu(self.body(x))
        for i in range(2):
            h = h + self.mixers[i](h)
        return self.heads[task](h)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8)
    model = MultiTask()
    model.mixers = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for step, (x, y) in enumerate(loader):
            loss = nn.functional.mse_loss(model(x, "a" if step % 2 == 0 else "b"), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''


def test_a_head_picked_by_an_input_looks_for_unused_parameters(tmp_path: Path) -> None:
    """``self.heads[task](h)``: one head per step, the other without a gradient (a trial's crash at step 2).
    An index a loop over the layers counts (``self.mixers[i]``) runs them all: alone it needs no search."""
    text, output = migrate(tmp_path, HEAD_BY_TASK)
    assert "find_unused_parameters=True" in text, text
    assert "its forward() picks an entry of `self.heads` by an input" in output, output
    every_one = HEAD_BY_TASK.replace("return self.heads[task](h)", "return self.heads['a'](h) + self.heads['b'](h)")
    text, _ = migrate(tmp_path, every_one)
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text, text


@pytest.mark.e2e
@pytest.mark.distributed
def test_the_migrated_model_with_a_head_picked_by_task_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate(tmp_path, HEAD_BY_TASK)
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert (tmp_path / "final.pt").exists()



NANOGPT = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(4, 8)
        self.lm_head = nn.Linear(8, 3)

    def forward(self, x, targets=None):
        logits = self.lm_head(torch.relu(self.emb(x)))
        if targets is None:
            loss = None
        else:
            loss = F.cross_entropy(logits, targets)
        return logits, loss


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8, shuffle=True)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for x, y in loader:
            _, loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
'''

LSTM = NANOGPT.replace("    model = GPT()\n", "    model = nn.LSTM(4, 3, batch_first=True)\n").replace(
    "            _, loss = model(x, y)\n", "            out, _ = model(x.unsqueeze(1))\n            loss = F.mse_loss(out[:, 0, 0], y.float())\n"
)
AUX_HEAD = NANOGPT.replace("        self.lm_head = nn.Linear(8, 3)\n", "        self.lm_head = nn.Linear(8, 3)\n        self.aux = nn.Linear(8, 2)\n").replace(
    "        return logits, loss\n", "        return self.aux(torch.relu(self.emb(x))), loss\n"
)


#: nanoGPT's ``if compile: model = torch.compile(model)``: the compiled model runs the same forward.
def compiled(source: str) -> str:
    """The program with nanoGPT's ``if compile: model = torch.compile(model)`` (the same forward runs)."""
    return source.replace("def main():\n", "COMPILE = False\n\n\ndef main():\n").replace(
        "    model = GPT()\n", "    model = GPT()\n    if COMPILE:\n        model = torch.compile(model)\n"
    )


@pytest.mark.parametrize(
    "source",
    [NANOGPT, LSTM, compiled(NANOGPT)],
    ids=["loss-from-logits", "recurrent-state", "loss-from-logits-compiled"],
)
def test_a_discarded_output_computed_by_the_same_layers_needs_no_search(tmp_path: Path, source: str) -> None:
    """A trial: ``_, loss = model(x, y)`` (nanoGPT: the loss is computed from the logits) and ``out, _ = lstm(x)``
    got ``find_unused_parameters=True``, which costs every step and makes torch warn that nothing was unused;
    so did the same model behind ``torch.compile`` (a later trial)."""
    text, _ = migrate(tmp_path, source)
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text, text


@pytest.mark.parametrize("source", [AUX_HEAD, compiled(AUX_HEAD)], ids=["plain", "compiled"])
def test_a_discarded_output_of_a_head_of_its_own_looks_for_unused_parameters(tmp_path: Path, source: str) -> None:
    text, output = migrate(tmp_path, source)
    assert "find_unused_parameters=True" in text, text


#: A head the model builds whatever its setting, and calls only when the setting holds: with the setting off,
#: its parameters never get a gradient and DDP fails at the second step (a trial's crash; the report was silent).
SETTING = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, use_aux=DEFAULT):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)
        BUILD
        self.use_aux = VALUE

    def forward(self, x):
        h = torch.relu(self.body(x))
        out = self.head(h)
        if TEST:
            out = out + 0.3 * self.aux(h)
        return out


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = CONSTRUCT
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''


def setting(value: str = "use_aux", default: str = "True", construct: str = "Net()", test: str = "self.use_aux", build: str = "self.aux = nn.Linear(8, 1)") -> str:
    return (
        SETTING.replace("VALUE", value).replace("DEFAULT", default).replace("CONSTRUCT", construct).replace("TEST", test).replace("BUILD", build)
    )


#: A cfg read from a file: the analysis cannot tell the setting.
UNKNOWN_SETTING = setting(construct="Net(use_aux=bool(len(sys.argv) > 5))").replace("import torch\n", "import sys\nimport torch\n", 1)


@pytest.mark.parametrize(
    "source",
    [
        setting(value="False"),
        setting(construct="Net(use_aux=False)"),
        setting(default="False"),
        setting(value="0.0", test="self.use_aux > 0"),
        UNKNOWN_SETTING,
    ],
    ids=["literal-false", "constructed-false", "default-false", "weight-zero", "unknown"],
)
def test_a_layer_a_setting_may_keep_from_running_looks_for_unused_parameters(tmp_path: Path, source: str) -> None:
    text, output = migrate(tmp_path, source)
    assert "find_unused_parameters=True" in text, output
    assert "its forward() calls `self.aux` only when" in output and "and builds it whether or not" in output, output


@pytest.mark.parametrize(
    "source",
    [
        setting(value="True"),
        setting(construct="Net(use_aux=True)"),
        setting(),
        setting(value="0.4", test="self.use_aux > 0"),
        setting(value="0.4", test="self.training and self.use_aux > 0"),
        # The layer is built only where the setting asks for it: no layer without a gradient.
        setting(construct="Net(use_aux=bool(len(sys.argv) > 5))", build="if use_aux:\n            self.aux = nn.Linear(8, 1)").replace("import torch\n", "import sys\nimport torch\n", 1),
        # A test of the layer itself (ResNet's ``if self.downsample is not None``).
        setting(build="self.aux = nn.Linear(8, 1) if use_aux else None", test="self.aux is not None"),
    ],
    ids=["literal-true", "constructed-true", "default-true", "weight", "training-and-weight", "built-under-the-setting", "test-of-the-layer"],
)
def test_a_setting_under_which_the_layer_runs_or_is_built_needs_no_search(tmp_path: Path, source: str) -> None:
    text, _ = migrate(tmp_path, source)
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text, text


@pytest.mark.e2e
@pytest.mark.distributed
def test_the_migrated_model_with_a_head_its_setting_turns_off_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate(tmp_path, setting(value="False"))
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert (tmp_path / "final.pt").exists()


def test_a_setting_passed_positionally_to_a_class_of_another_module_is_read(tmp_path: Path) -> None:
    """``Net(True)`` in the entry, ``Net.__init__(self, use_aux)`` in models.py: the argument binds to
    ``use_aux``, not to ``self`` (the method's class is found in its own module)."""
    source = setting(construct="Net(True)", default="None")
    model_class = source[source.index("class Net") : source.index("def main")]
    (tmp_path / "models.py").write_text("import torch\nimport torch.nn as nn\n\n\n" + model_class)
    entry = source.replace(model_class, "").replace("from torch.utils.data", "from models import Net\nfrom torch.utils.data")
    (tmp_path / "train.py").write_text(entry)
    result = CliRunner().invoke(cli, ["migrate", str(tmp_path / "train.py")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "train.py").read_text()
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text, text
    (tmp_path / "train.py").write_text(entry.replace("Net(True)", "Net(False)"))
    result = CliRunner().invoke(cli, ["migrate", str(tmp_path / "train.py")])
    assert "find_unused_parameters=True" in (tmp_path / "train.py").read_text(), result.output


@pytest.mark.parametrize(
    "source",
    [
        # The head runs on every training step after an evaluation-only early return.
        setting(value="True", test="not self.training").replace(
            "        if not self.training:\n            out = out + 0.3 * self.aux(h)\n        return out\n",
            "        if not self.training:\n            return self.aux(h).softmax(-1)\n        return out + self.aux(h)\n",
        ),
        # The layer runs in both branches of the setting's test.
        setting(construct="Net(use_aux=True)").replace(
            "        if self.use_aux:\n            out = out + 0.3 * self.aux(h)\n        return out\n",
            "        if self.use_aux:\n            return out + 0.3 * self.aux(h)\n        return out - self.aux(h)\n",
        ),
    ],
    ids=["evaluation-branch", "both-branches"],
)
def test_a_layer_another_call_runs_on_every_step_needs_no_search(tmp_path: Path, source: str) -> None:
    """A review: one call of a layer under a false setting (an evaluation-only branch) was read as the layer
    skipped, though its other call runs on every step; with reentrant checkpointing in the model, the needless
    flag crashed the migrated program ("Expected to mark a variable ready only once")."""
    assert "self.aux(h)" in source
    text, _ = migrate(tmp_path, source)
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text, text


def test_reentrant_checkpointing_in_an_inner_class_refuses_the_search(tmp_path: Path) -> None:
    """The outer class skips a layer on some steps, an inner one checkpoints reentrantly: DDP cannot run that
    with find_unused_parameters=True, so none is asked for (whichever class comes first)."""
    source = setting(value="False").replace(
        "        self.body = nn.Linear(4, 8)\n", "        self.body = Body()\n"
    ).replace(
        "class Net(nn.Module):",
        "class Body(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(4, 8)\n\n"
        "    def forward(self, x):\n        return checkpoint(self.lin, x, use_reentrant=True)\n\n\nclass Net(nn.Module):",
    ).replace("import torch.nn.functional as F\n", "import torch.nn.functional as F\nfrom torch.utils.checkpoint import checkpoint\n")
    text, _ = migrate(tmp_path, source)
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text, text


#: DCGAN's generator: ``if input.is_cuda and self.ngpu > 1: return data_parallel(...)`` / ``return self.main(x)``
#: runs ``self.main`` on every path (two trials: a needless flag, "did not find any unused parameters").
EVERY_PATH = SETTING.replace("        BUILD\n", "        self.aux = nn.Linear(8, 1)\n").replace(
    "        if TEST:\n            out = out + 0.3 * self.aux(h)\n        return out\n",
    "        if x.is_cuda and torch.cuda.device_count() > 1:\n            return out + self.aux(h)\n        return out - self.aux(h)\n",
).replace("VALUE", "use_aux").replace("DEFAULT", "True").replace("CONSTRUCT", "Net()")


@pytest.mark.parametrize(
    "source",
    [EVERY_PATH, NANOGPT.replace("    model = GPT()\n", "    device = 'cuda' if torch.cuda.is_available() else 'cpu'\n    model = GPT().to(device)\n")],
    ids=["both-sides-of-a-dynamic-test", "discarded-output-of-a-moved-model"],
)
def test_a_layer_on_every_path_or_an_output_computed_from_another_needs_no_search(tmp_path: Path, source: str) -> None:
    text, _ = migrate(tmp_path, source)
    assert "DistributedDataParallel(" in text and "find_unused_parameters" not in text, text


def test_a_layer_skipped_on_one_path_of_nested_tests_looks_for_unused_parameters(tmp_path: Path) -> None:
    """``if flag: (if dynamic: a(b(x)) else: a(x)) else: a(b(x))``: ``b`` runs on the outer test's two sides but
    not on every path; calling it on both sides of one test is not enough (the torch package's own DDP test
    model of this shape)."""
    source = EVERY_PATH.replace(
        "        if x.is_cuda and torch.cuda.device_count() > 1:\n            return out + self.aux(h)\n        return out - self.aux(h)\n",
        "        if self.use_aux:\n            if x.sum() > 0:\n                return out + self.aux(h)\n            return out\n        return out - self.aux(h)\n",
    )
    assert "x.sum() > 0" in source
    text, output = migrate(tmp_path, source)
    assert "find_unused_parameters=True" in text, output
    assert "its forward() calls `self.aux` only on some steps" in output, output


#: The forward returns a dict; the step reads its auxiliary head only where a weight allows (a re-trial: with the
#: weight 0 by default, DDP stopped at step 2, plain python as under torchrun, 0 items).
DICT_OUTPUT = OUTPUT_DROPPED.replace(
    "        return self.dec(z), self.cls(z)\n", '        return {"recon": self.dec(z), "logits": self.cls(z), "norm": z.norm()}\n'
).replace("            recon, logits = model(xb)\n            loss = F.mse_loss(recon, xb)\n", '            out = model(xb)\n            loss = F.mse_loss(out["recon"], xb)\n')


@pytest.mark.parametrize(
    ("use", "flag"),
    [
        ('if epoch > 5:\n                loss = loss + F.cross_entropy(out["logits"], yb)', True),
        ('loss = loss + F.cross_entropy(out["logits"], yb)', False),
        ('if epoch > 5:\n                loss = loss + out["norm"]\n            loss = loss + F.cross_entropy(out["logits"], yb)', False),
    ],
    ids=["head-on-some-steps", "head-on-every-step", "computed-item-on-some-steps"],
)
def test_an_item_of_a_dict_output_used_on_some_steps_looks_for_unused_parameters(tmp_path: Path, use: str, flag: bool) -> None:
    source = DICT_OUTPUT.replace("USE", use)
    assert 'out["recon"]' in source
    text, report = migrate(tmp_path, source)
    assert ("find_unused_parameters=True" in text) is flag, report
    assert "DDP032" not in report, report


def forward_of(body: str) -> str:
    """The SETTING model with its forward's body replaced (``h`` is the body's output, ``x`` the input)."""
    return EVERY_PATH.replace(
        "        if x.is_cuda and torch.cuda.device_count() > 1:\n            return out + self.aux(h)\n        return out - self.aux(h)\n", body
    )


@pytest.mark.parametrize(
    ("body", "flag"),
    [
        # An early return inside a with block (or a loop over time steps) skips the layer on some steps.
        ("        with torch.autocast('cpu', enabled=False):\n            if h.mean() > 0.3:\n                return out\n        return out + self.aux(h)\n", True),
        ("        for _ in range(2):\n            if h.mean() > 0.3:\n                return out\n        return out + self.aux(h)\n", True),
        # A loop over time steps runs its cell on every step.
        ("        for _ in range(x.size(1)):\n            h = h + self.aux(h).mean()\n        return out + h.sum()\n", False),
        # ResNet's downsample: the layer's own presence decides, whichever way the test is written.
        ("        if self.aux is None:\n            extra = h\n        else:\n            extra = self.aux(h)\n        return out + extra.sum()\n", False),
        ("        extra = self.aux(h) if self.aux is not None else h\n        return out + extra.sum()\n", False),
        # DCGAN: the layer handed to data_parallel on one side, called on the other.
        ("        if x.is_cuda and torch.cuda.device_count() > 1:\n            extra = nn.parallel.data_parallel(self.aux, h)\n"
         "        else:\n            extra = self.aux(h)\n        return out + extra\n", False),
    ],
    ids=["return-in-with", "return-in-a-loop", "time-steps", "downsample-is-none", "downsample-expression", "dcgan"],
)
def test_paths_through_forward(tmp_path: Path, body: str, flag: bool) -> None:
    """A review's cases: whether every path through forward() runs the layer decides the search."""
    source = forward_of(body)
    assert body in source
    text, output, _ = migrate_script(tmp_path, source)  # (DCGAN's data_parallel call is left to a human: exit 1)
    assert "DistributedDataParallel(" in text and ("find_unused_parameters=True" in text) is flag, output


LAYER_LOOP = SCRIPT.replace(
    "            if self.training and torch.rand(()) < self.layerdrop:\n                continue\n            h = block(h)\n",
    "            h = block(h)\n            if h.abs().mean() < 0.35:\n                break\n",
)


def test_a_loop_over_the_layers_cut_short_looks_for_unused_parameters(tmp_path: Path) -> None:
    """Adaptive depth (``x = block(x); if ...: break``): the later blocks do not run on that step."""
    assert "break" in LAYER_LOOP
    text, output = migrate(tmp_path, LAYER_LOOP)
    assert "find_unused_parameters=True" in text, output


TWO_HEADS_ONE_READ = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(6, 16)
        self.main_head = nn.Linear(16, 3)
        self.aux_head = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.relu(self.trunk(x))
        return self.main_head(h), self.aux_head(h)


def main():
    x = torch.randn(32, 6)
    loader = DataLoader(TensorDataset(x, x[:, :3].argmax(1)), batch_size=8)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        for xb, t in loader:
            logits, _ = model(xb)
            opt.zero_grad()
            F.cross_entropy(logits, t).backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


def test_an_output_never_read_is_said_to_be_never_used(tmp_path: Path) -> None:
    """A trial: the flag's reason said `_` was used "only on some steps"; it is never used."""
    migrated, report, _ = migrate_script(tmp_path, TWO_HEADS_ONE_READ)
    assert "find_unused_parameters=True" in migrated, migrated
    assert "the training step never uses `_`, an output of its forward()" in report, report


OPTIONAL_HEAD = '''
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, with_aux=False):
        super().__init__()
        self.enc = nn.Linear(6, 24)
        self.cls = nn.Linear(24, 2)
        if with_aux:
            self.aux = nn.Linear(24, 1)

    def forward(self, x):
        return self.cls(F.relu(self.enc(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--aux", action="store_true")
    args = p.parse_args()
    x = torch.randn(64, 6)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16)
    model = nn.DataParallel(Net(with_aux=args.aux))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for xb, yb in loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    print("trained", flush=True)


if __name__ == "__main__":
    main()
'''


@pytest.mark.distributed
def test_a_head_built_under_a_command_line_flag_and_never_used_gets_the_flag(tmp_path: Path) -> None:
    """A trial's crash with 0 items: ``args.aux`` (the option) was read as a use of ``self.aux`` (the layer), so
    ``--aux`` stopped DDP at the second step ("Expected to have finished reduction")."""
    from launch import run_torchrun

    migrated, report, _ = migrate_script(tmp_path, OPTIONAL_HEAD)
    assert "find_unused_parameters=True" in migrated and "`self.aux` (nn.Linear) is never used" in report, report
    assert "trained" in run_torchrun(tmp_path / "train.py", "--aux", cwd=tmp_path, timeout=120).output


CHECKPOINTED_WHILE_TRAINING = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.training else b(x)
        return x


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randn(32, 8)), batch_size=8)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
'''


def test_a_layer_run_on_both_sides_of_a_test_is_run_on_every_step(tmp_path: Path) -> None:
    """A trial's needless flag: ``checkpoint(b, x) if self.training else b(x)`` runs ``b`` either way."""
    migrated, report, _ = migrate_script(tmp_path, CHECKPOINTED_WHILE_TRAINING)
    assert "DistributedDataParallel(" in migrated and "find_unused_parameters" not in migrated, report
