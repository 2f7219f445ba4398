"""DDP040 (training batches from no DataLoader) reads the whole program, through the real command line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

LOOP = "    for step in range(4):\n        x = {batch}\n        model(x).sum().backward()\n        opt.step()\n"
HEAD = "import torch\nimport torch.nn as nn\n{imports}\n\ndef main():\n    model = nn.Linear(4, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
TAIL = '\n\nif __name__ == "__main__":\n    main()\n'
DATA = "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef build_loader():\n    return DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8)\n"


def _lint(*args: str) -> list[tuple[str, int, str]]:
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP040", *args], catch_exceptions=False)
    return [(p, int(line), code) for p, line, code in re.findall(r"^(\S+?):(\d+):\d+: (DDP\d{3}) ", result.stdout, re.M)]


@pytest.fixture(autouse=True)
def _program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.py").write_text(DATA)
    (tmp_path / "with_loader.py").write_text(HEAD.format(imports="from data import build_loader\n") + LOOP.format(batch="next(iter(build_loader()))[0]") + TAIL)
    (tmp_path / "drawn.py").write_text(HEAD.format(imports="") + LOOP.format(batch="torch.randn(8, 4)") + TAIL)
    seeded = HEAD.format(imports="from ddp_migrate import runtime\n").replace("    model =", "    torch.manual_seed(3 + runtime.rank())\n    model =")
    (tmp_path / "seeded.py").write_text(seeded + LOOP.format(batch="torch.randn(8, 4)") + TAIL)


def test_a_loader_built_in_an_imported_module_shards_the_data() -> None:
    assert _lint("with_loader.py") == []


def test_batches_drawn_with_no_loader_are_reported_at_the_training_step_and_left_to_a_human() -> None:
    assert _lint("drawn.py") == [("drawn.py", 10, "DDP040")]
    migrated = CliRunner().invoke(cli, ["drawn.py"], catch_exceptions=False)
    assert migrated.exit_code == 1, migrated.output  # a finding remains
    assert "review drawn.py:15:" in migrated.output and "1 item(s) need a human" in migrated.output
    assert "launch it with: torchrun --standalone --nproc_per_node=<processes> drawn.py (once the review items above are done)" in migrated.output
    assert "# TODO(ddp-migrate): training batches here come from no DataLoader" in Path("drawn.py").read_text()


def test_each_training_loop_without_a_loader_is_reported(tmp_path: Path) -> None:
    """A trial's program pre-trained on one hand-drawn loop and fine-tuned on another in the same ``main()``: only the
    first was reviewed, the second trained every rank on the same data without a word. One of two steps of one loop
    (a GAN's) is one report."""
    two = HEAD.format(imports="") + LOOP.format(batch="torch.randn(8, 4)") + LOOP.format(batch="torch.randn(8, 4) * 2") + TAIL
    (tmp_path / "two.py").write_text(two)
    assert _lint("two.py") == [("two.py", 10, "DDP040"), ("two.py", 14, "DDP040")]
    gan = LOOP.format(batch="torch.randn(8, 4)").replace("        opt.step()\n", "        model(-x).sum().backward()\n        opt.step()\n")
    (tmp_path / "gan.py").write_text(HEAD.format(imports="") + gan + TAIL)
    assert _lint("gan.py") == [("gan.py", 10, "DDP040")]


def test_draws_seeded_by_the_rank_are_each_ranks_own() -> None:
    assert _lint("seeded.py") == []


@pytest.mark.parametrize(
    ("shape", "generator", "batch", "reported"),
    [
        ("a generator seeded alike draws", "torch.Generator().manual_seed(0)", "torch.randn(8, 4, generator=g)", True),
        ("a generator seeded by the rank draws", "torch.Generator().manual_seed(runtime.rank())", "torch.randn(8, 4, generator=g)", False),
        ("torch's own state draws", "torch.Generator().manual_seed(0)", "torch.randn(8, 4)", False),
        ("torch's own state draws in place", "torch.Generator().manual_seed(0)", "torch.empty(8, 4).uniform_()", False),
    ],
)
def test_a_rank_seed_counts_only_where_it_reaches_the_draws(shape: str, generator: str, batch: str, reported: bool) -> None:
    """A trial's program seeded torch by rank (for dropout) but drew its batches from a generator seeded alike:
    every rank trained on the same batches, 0 items for a human."""
    seeded = HEAD.format(imports="from ddp_migrate import runtime\n").replace(
        "    model =", f"    torch.manual_seed(3 + runtime.rank())\n    g = {generator}\n    model ="
    )
    Path("gen.py").write_text(seeded + LOOP.format(batch=batch) + TAIL)
    assert bool(_lint("gen.py")) is reported, shape


@pytest.mark.parametrize(
    ("shape", "generator", "batch", "reported"),
    [
        ("numpy generator seeded from the rank", "np.random.default_rng(100 + runtime.rank())", "torch.from_numpy(rng.standard_normal((8, 4))).float()", False),
        ("Python generator seeded from the rank", "random.Random(runtime.rank())", "torch.tensor([[rng.random() for _ in range(4)] for _ in range(8)])", False),
        ("numpy generator seeded alike", "np.random.default_rng(100)", "torch.from_numpy(rng.standard_normal((8, 4))).float()", True),
        ("generator seeded from the rank, never drawn from", "np.random.default_rng(runtime.rank())", "torch.randn(8, 4)", True),
        # Noise from the rank-seeded generator on a batch every rank draws alike: still the same samples.
        (
            "generator seeded from the rank adds noise only",
            "np.random.default_rng(runtime.rank())",
            "torch.randn(8, 4) + torch.from_numpy(rng.normal(0, 0.01, (8, 4))).float()",
            True,
        ),
    ],
)
def test_a_numpy_or_python_generator_seeded_from_the_rank_draws_each_ranks_own(shape: str, generator: str, batch: str, reported: bool) -> None:
    """A trial's nanoGPT-style program drew its batches from ``np.random.default_rng(100 + RANK)``: already each
    rank's own, yet DDP040 asked a human to shard it."""
    seeded = HEAD.format(imports="import random\nimport numpy as np\nfrom ddp_migrate import runtime\n").replace(
        "    model =", f"    rng = {generator}\n    model ="
    )
    Path("gen.py").write_text(seeded + LOOP.format(batch=batch) + TAIL)
    assert bool(_lint("gen.py")) is reported, shape


def test_a_rank_seed_replaced_by_one_alike_on_every_rank_counts_no_more() -> None:
    seeded = HEAD.format(imports="from ddp_migrate import runtime\n").replace(
        "    model =", "    torch.manual_seed(3 + runtime.rank())\n    torch.manual_seed(3)\n    model ="
    )
    Path("reseeded.py").write_text(seeded + LOOP.format(batch="torch.randn(8, 4)") + TAIL)
    assert [code for _, _, code in _lint("reseeded.py")] == ["DDP040"]


TWO_PHASES = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def pretrain(model, opt, loader):
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()


def finetune(model, opt, X, Y, batch_size=8):
    for epoch in range(2):
        perm = torch.randperm(len(X))
        for i in range(0, len(X), batch_size):
            idx = perm[i : i + batch_size]
            opt.zero_grad()
            nn.functional.mse_loss(model(X[idx]), Y[idx]).backward()
            opt.step()


def main():
    torch.manual_seed(0)
    X, Y = torch.randn(24, 4), torch.randn(24, 1)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pretrain(model, opt, DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True))
    finetune(model, opt, X, Y)


if __name__ == "__main__":
    main()
'''


def test_batches_cut_by_hand_beside_a_training_loader_are_reviewed(tmp_path: Path) -> None:
    """A trial's fine-tuning pass indexed tensors by hand after a loader's pre-training: the loader was
    sharded, the fine-tuning trained every rank on all 24 samples, and the report said nothing (DDP040 looked
    only at programs without a training loader). The pre-training loop's backward() gets no review."""
    Path("two.py").write_text(TWO_PHASES)
    found = _lint("two.py")
    line = TWO_PHASES.splitlines().index("            nn.functional.mse_loss(model(X[idx]), Y[idx]).backward()") + 1
    assert found == [("two.py", line, "DDP040")], found


PHASES = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

datasets = {"train": TensorDataset(torch.randn(64, 6), torch.randint(0, 2, (64,))), "val": TensorDataset(torch.randn(32, 6), torch.randint(0, 2, (32,)))}
dataloaders = {x: DataLoader(datasets[x], batch_size=16, shuffle=(x == "train")) for x in ["train", "val"]}


def train_model(model, criterion, optimizer, num_epochs=2):
    for epoch in range(num_epochs):
        for phase in ["train", "val"]:
            model.train() if phase == "train" else model.eval()
            for inputs, labels in dataloaders[phase]:
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == "train"):
                    loss = criterion(model(inputs), labels)
                    if phase == "train":
                        loss.backward()
                        optimizer.step()
    return model


model = nn.Linear(6, 2)
train_model(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1))
'''


def test_batches_of_a_dict_of_loaders_come_from_a_loader() -> None:
    """The transfer-learning tutorial's ``for inputs, labels in dataloaders[phase]:``: a trial got a DDP040
    review saying the batches came from no DataLoader (beside DDP005's review of the dict's loaders)."""
    Path("phases.py").write_text(PHASES)
    assert _lint("phases.py") == []


ITER_LOADER = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class IterLoader:
    def __init__(self, dataloader):
        self._dataloader = dataloader
        self.iter_loader = iter(dataloader)

    def __next__(self):
        try:
            return next(self.iter_loader)
        except StopIteration:
            self.iter_loader = iter(self._dataloader)
            return next(self.iter_loader)


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = IterLoader(DataLoader(data, batch_size=8, shuffle=True))
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for it in range(40):
        x, y = next(loader)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
'''


def test_a_loader_drawn_through_a_wrapper_the_analysis_cannot_follow_is_named(tmp_path: Path) -> None:
    """mmcv's ``IterLoader`` (batches drawn by its ``__next__``): the review said the batches came from no
    DataLoader; it now names the loader the program builds and asks to shard it by hand."""
    script = tmp_path / "train.py"
    script.write_text(ITER_LOADER)
    report = CliRunner().invoke(cli, [str(script)], catch_exceptions=False).output
    assert "DDP040 training batches here come from no DataLoader the analysis can follow, while the program builds one" in report, report
    line = next(n for n, text in enumerate(script.read_text().splitlines(), 1) if "loader = IterLoader(" in text)
    assert f"(line {line}, handed to something it cannot see through" in report, report  # a line of the migrated file


def test_a_decision_on_draws_seeded_from_the_rank_is_reviewed() -> None:
    """A trial's half-distributed program: batches drawn after ``torch.manual_seed(1337 + rank)``, and ``if val <
    1.75: break`` on one rank's estimate; the ranks left the loop apart (a crash under gloo), 0 items."""
    body = (
        "    torch.manual_seed(1337 + runtime.rank())\n"
        "    for step in range(40):\n"
        "        x = torch.randn(8, 4)\n"
        "        val = model(x).pow(2).mean().item()\n"
        "        if val < 0.5:\n"
        "            break\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
    )
    Path("early.py").write_text(HEAD.format(imports="from ddp_migrate import runtime\n") + body + TAIL)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP041", "early.py"], catch_exceptions=False)
    assert "DDP041 `val < 0.5` decides on val" in result.stdout, result.stdout


@pytest.mark.parametrize(("printed", "reported"), [("total", False), ("val", True)])
def test_rank_zero_prints_of_its_own_values_are_whole(printed: str, reported: bool) -> None:
    """What rank 0 alone computes (``if rank == 0: total = sum(...)``) is whole there; a value drawn per rank is not."""
    body = (
        "    torch.manual_seed(1337 + runtime.rank())\n"
        "    for step in range(4):\n"
        "        x = torch.randn(8, 4)\n"
        "        val = model(x).pow(2).mean().item()\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
        "    if runtime.rank() == 0:\n"
        "        total = sum(p.sum().item() for p in model.parameters())\n"
        f"        print({printed})\n"
    )
    Path("shown.py").write_text(HEAD.format(imports="from ddp_migrate import runtime\n") + body + TAIL)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP038", "shown.py"], catch_exceptions=False)
    assert ("DDP038" in result.stdout) is reported, result.stdout


TRAINER = '''
import torch


class Trainer:
    def __init__(self, model, batch_fn):
        self.model = model
        self.batch_fn = batch_fn
        self.opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def fit(self, iters):
        for it in range(iters):
            x, y = self.batch_fn()
            loss = (self.model(x) - y).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
'''

TRAINER_ENTRY = '''
import torch
import torch.nn as nn

from trainer import Trainer

data = torch.arange(5000) % 17


def get_batch(bs=8, T=6):
    ix = torch.randint(len(data) - T, (bs,))
    x = torch.stack([data[i:i + T] for i in ix]).float()
    return x, x.sum(1, keepdim=True)


def main():
    torch.manual_seed({seed})
    model = nn.Linear(6, 1)
    Trainer(model, get_batch).fit(20)


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(("seed", "reported"), [("0", True), ("int(os.environ.get('RANK', 0))", False)])
def test_a_step_in_a_trainer_of_another_module_is_the_entrys_training(seed: str, reported: bool) -> None:
    """A trial's program handed its get_batch to a Trainer of another module: every rank trained on the same
    batches, with 0 items for a human."""
    Path("trainer.py").write_text(TRAINER)
    Path("train.py").write_text(("import os\n" if "os." in seed else "") + TRAINER_ENTRY.format(seed=seed))
    expected_line = Path("train.py").read_text().splitlines().index("    Trainer(model, get_batch).fit(20)") + 1
    assert _lint("train.py", "trainer.py") == ([("train.py", expected_line, "DDP040")] if reported else [])
    if reported:
        migrated = CliRunner().invoke(cli, ["."], catch_exceptions=False)
        assert "DDP040 this call trains (backward() at line 16 of module trainer)" in migrated.output
        assert "1 item(s) need a human" in migrated.output


FAR_DRAWS = '''import os

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

ddp = int(os.environ.get("RANK", -1)) != -1
seed_offset = int(os.environ["RANK"]) if ddp else 0
device = "cpu"
data = torch.randint(0, 32, (5000,))


def get_batch():
    ix = torch.randint(len(data) - 16, (8,))
    x = torch.stack([data[i : i + 16] for i in ix])
    y = torch.stack([data[i + 1 : i + 17] for i in ix])
    return x.to(device), y.to(device)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 16)
        self.head = nn.Linear(16, 32)

    def forward(self, idx, targets):
        logits = self.head(self.emb(idx))
        return logits, nn.functional.cross_entropy(logits.view(-1, 32), targets.view(-1))


torch.manual_seed(1337)
model = Tiny()
if ddp:
    model = DDP(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
torch.manual_seed(1337 + seed_offset)
X, Y = get_batch()
for it in range(10):
    for micro_step in range(4):
        logits, loss = model(X, Y)
        loss = loss / 4
        X, Y = get_batch()
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
'''


def test_a_rank_seed_reaches_draws_several_steps_from_the_loss() -> None:
    """nanoGPT's shape (a trial): the batch drawn in ``get_batch`` reaches the loss through its returned
    ``x.to(device)``, the prefetched ``X, Y`` and the model's call; the draws were not seen to feed the loss (the
    walk's first, longer path used up the names, and a method's receiver was not followed), so DDP040 asked a
    human to shard data each rank already draws for itself."""
    Path("gpt.py").write_text(FAR_DRAWS)
    assert _lint("gpt.py") == []
    Path("gpt_alike.py").write_text(FAR_DRAWS.replace("torch.manual_seed(1337 + seed_offset)", "torch.manual_seed(1337)"))
    assert [code for _, _, code in _lint("gpt_alike.py")] == ["DDP040"]


@pytest.mark.parametrize("cut", ["torch.chunk(data, runtime.world_size())[runtime.rank()]", "shards[runtime.rank()]"])
def test_the_ranks_item_of_a_split_is_its_own_data(cut: str) -> None:
    """``shards = torch.chunk(data, world)`` then ``shards[rank]``: the split held in a name first (a review: reported)."""
    program = HEAD.format(imports="from ddp_migrate import runtime\n").replace(
        "    model =", f"    data = torch.randn(64, 4)\n    shards = torch.chunk(data, runtime.world_size())\n    mine = {cut}\n    model ="
    )
    Path("split.py").write_text(program + LOOP.format(batch="mine[step * 8 : step * 8 + 8]") + TAIL)
    assert _lint("split.py") == []
