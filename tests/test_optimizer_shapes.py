"""Optimizers that are not a ``torch.optim.X(...)`` call: the model they train is still wrapped.

A trial's silent wrong migrations: a model trained by an optimizer from a registry (``OPTIMIZERS[cfg["type"]](...)``),
a class of the program (``class LARS(Optimizer)``), ``getattr(torch.optim, name)``, a library (``Lion``,
``create_optimizer_v2(model, ...)``) or parameter groups of the model's tensors got a ``DistributedSampler`` but
no ``DistributedDataParallel``: each rank trained its own copy on its half of the data, the weights drifted apart,
and the report said nothing needed a human. A call that takes a model's parameters and is stepped like an
optimizer now names the model; where none can be read, the ``backward()`` gets a review line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_torchrun
from migrated import migrate_script, printed_on_every_rank

HEAD = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
'''

BODY = '''

def main():
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Linear(10, 3).to(device)
    optimizer = {optimizer}
    ds = TensorDataset(torch.randn(64, 10), torch.randint(0, 3, (64,)))
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    for epoch in range(2):
        for x, y in loader:
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    print("weights", round(sum(p.pow(2).sum().item() for p in model.parameters()), 6), flush=True)


if __name__ == "__main__":
    main()
'''

#: (name, lines before ``main``, the optimizer's expression)
SPELLINGS = [
    ("registry", 'OPTIMIZERS = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam}\n', 'OPTIMIZERS["SGD"](model.parameters(), lr=0.1)'),
    ("getattr", "", 'getattr(torch.optim, "SGD")(model.parameters(), lr=0.1)'),
    ("subclass", "\n\nclass Nesterov(torch.optim.SGD):\n    pass\n", "Nesterov(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)"),
    ("library_class", "from lion_pytorch import Lion\n", "Lion(model.parameters(), lr=1e-4)"),
    ("library_factory", "from timm.optim import create_optimizer_v2\n", 'create_optimizer_v2(model, "adamw", lr=1e-3)'),
    ("tensor_groups", "", 'torch.optim.SGD([{"params": model.weight}, {"params": model.bias, "lr": 0.01}], lr=0.1)'),
]


def program(before: str, optimizer: str) -> str:
    """A training script whose optimizer is ``optimizer``, with ``before`` at module level."""
    return HEAD + before + BODY.replace("{optimizer}", optimizer)


@pytest.mark.parametrize("before, optimizer", [s[1:] for s in SPELLINGS], ids=[s[0] for s in SPELLINGS])
def test_the_model_an_optimizer_of_any_spelling_trains_is_wrapped(tmp_path: Path, before: str, optimizer: str) -> None:
    migrated, report, code = migrate_script(tmp_path, program(before, optimizer))
    assert "    model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n" in migrated, report + migrated
    assert "DDP011 line" in report and "0 item(s) need a human" in report, report
    assert code == 0, report


def test_a_program_class_optimizer_trains_one_model_on_every_rank(tmp_path: Path) -> None:
    """Under torchrun the two ranks end with the same weights (each trained alone, they differed)."""
    _, before, optimizer = SPELLINGS[2]
    migrated, report, _ = migrate_script(tmp_path, program(before, optimizer))
    (tmp_path / "train.py").write_text(printed_on_every_rank(migrated))  # (each rank's own weights)
    output = run_torchrun(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
    weights = [line for line in output.splitlines() if line.startswith("weights")]
    assert len(weights) == 2 and weights[0] == weights[1], output


OPTIM_MODULE = '''
import torch

OPTIMIZERS = {"SGD": torch.optim.SGD, "AdamW": torch.optim.AdamW}


def build_optimizer(model, cfg):
    cfg = dict(cfg)
    return OPTIMIZERS[cfg.pop("type")](model.parameters(), **cfg)
'''


def test_a_builder_in_another_module_has_the_model_wrapped_where_it_is_called(tmp_path: Path) -> None:
    """``build_optimizer(model, cfg)`` of an mmcv-style registry: the wrap goes into the script that calls it
    (it was a TODO in the builder's module, where ``model`` is a parameter)."""
    (tmp_path / "optim.py").write_text(OPTIM_MODULE)
    source = program("from optim import build_optimizer\n", 'build_optimizer(model, {"type": "SGD", "lr": 0.1})')
    (tmp_path / "train.py").write_text(source)
    result = CliRunner().invoke(cli, [str(tmp_path)], catch_exceptions=False)
    migrated = (tmp_path / "train.py").read_text()
    assert "    model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n" in migrated, result.output
    assert (tmp_path / "optim.py").read_text() == OPTIM_MODULE, result.output
    assert "0 item(s) need a human" in result.output, result.output


def test_a_model_that_builds_its_own_optimizer_is_wrapped_by_its_caller_s_name(tmp_path: Path) -> None:
    """``model.configure_optimizers(lr)`` (nanoGPT's spelling): the review said ``self is trained``; the
    model is now wrapped in ``main`` and the method reached through ``.module``."""
    before = '''

class Net(nn.Linear):
    def configure_optimizers(self, lr):
        return torch.optim.AdamW(self.parameters(), lr=lr)
'''
    source = program(before, "model.configure_optimizers(1e-3)").replace("nn.Linear(10, 3)", "Net(10, 3)")
    migrated, report, code = migrate_script(tmp_path, source)
    assert "    model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n" in migrated, report
    assert "    optimizer = model.module.configure_optimizers(1e-3)\n" in migrated, migrated
    assert code == 0 and "self is trained" not in report, report


def test_a_scheduler_of_a_program_optimizer_is_no_second_model(tmp_path: Path) -> None:
    """A learning-rate rule of the program takes the optimizer (not the model's parameters twice): one wrap."""
    before = '''

class LARS(torch.optim.SGD):
    pass


class Warmup:
    def __init__(self, opt, steps):
        self.opt, self.steps, self.count = opt, steps, 0

    def step(self):
        self.count += 1
        for group in self.opt.param_groups:
            group["lr"] = 0.1 * min(1.0, self.count / self.steps)
'''
    source = program(before, "LARS(model.parameters(), lr=0.1)").replace(
        "    ds = TensorDataset", "    warmup = Warmup(optimizer, 4)\n    ds = TensorDataset", 1
    ).replace("            optimizer.step()\n", "            optimizer.step()\n            warmup.step()\n", 1)
    migrated, report, code = migrate_script(tmp_path, source)
    assert migrated.count("DistributedDataParallel(") == 1, migrated
    assert code == 0, report


def test_a_model_no_optimizer_names_gets_a_review_at_its_backward(tmp_path: Path) -> None:
    """An optimizer built by a factory the analysis cannot read, from parameters it cannot trace: nothing to
    wrap by name, so the report says the model goes unwrapped (it said nothing needed a human)."""
    before = "from hydra.utils import instantiate\nfrom helpers import trainable\n"
    source = program(before, 'instantiate({"_target_": "torch.optim.SGD", "lr": 0.1}, params=trainable())')
    migrated, report, code = migrate_script(tmp_path, source)
    assert "    model = DistributedDataParallel(" not in migrated, migrated
    assert "review" in report and "DDP011 `loss.backward()` trains a model" in report, report
    assert "1 item(s) need a human" in report and code == 1, report


LIBRARY_LOOP = '''
import torch.nn.functional as F


def fit(model, optimizer, loader, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
'''


def test_a_loop_handed_its_model_and_optimizer_is_not_reported_alone(tmp_path: Path) -> None:
    """A library's ``fit(model, optimizer, ...)`` linted on its own: what it steps comes from its callers."""
    (tmp_path / "loop.py").write_text(LIBRARY_LOOP)
    result = CliRunner().invoke(cli, ["lint", str(tmp_path / "loop.py")], catch_exceptions=False)
    assert "DDP011" not in result.output, result.output


def test_a_model_a_library_distributes_is_not_wrapped_again(tmp_path: Path) -> None:
    """FSDP, DeepSpeed, Accelerate: the program distributes its model its own way (no DDP011, no review)."""
    source = program(
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n", "torch.optim.SGD(model.parameters(), lr=0.1)"
    ).replace("    optimizer = torch.optim", "    model = FSDP(model)\n    optimizer = torch.optim", 1)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP011", "-"], input=source, catch_exceptions=False)
    assert "DDP011" not in result.output, result.output
    accelerate = program("from accelerate import Accelerator\n", "Accelerator().prepare(make())").replace(
        "            loss.backward()", "            accelerator.backward(loss)"
    )
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP011", "-"], input=accelerate, catch_exceptions=False)
    assert "DDP011" not in result.output, result.output


#: Shapes a review of the first version found read as optimizers (each wrapped a frozen model: DDP refused it).
EMA_TEACHER = HEAD + '''import copy


class EMATeacher:
    def __init__(self, teacher, student, decay=0.99):
        self.teacher, self.student, self.decay = teacher, student, decay

    @torch.no_grad()
    def step(self):
        for t, s in zip(self.teacher.parameters(), self.student.parameters()):
            t.mul_(self.decay).add_(s, alpha=1 - self.decay)


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    student = nn.Linear(4, 1)
    teacher = copy.deepcopy(student).requires_grad_(False)
    optimized_teacher = torch.compile(teacher)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    ema = EMATeacher(teacher, student)
    for epoch in range(2):
        for x, y in loader:
            with torch.no_grad():
                target = teacher(x) if epoch else optimized_teacher(x)
            loss = F.mse_loss(student(x), y) + F.mse_loss(student(x), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ema.step()


if __name__ == "__main__":
    main()
'''


def test_an_ema_teacher_stepped_or_compiled_is_no_trained_model(tmp_path: Path) -> None:
    """A class of the program with a ``step()`` that is no Optimizer, and a name like ``optimized_teacher``."""
    migrated, report, code = migrate_script(tmp_path, EMA_TEACHER)
    assert "    student = DistributedDataParallel(student, device_ids=runtime.device_ids())\n" in migrated, report
    assert migrated.count("DistributedDataParallel(") == 1, migrated
    assert code == 0, report


MINGPT = HEAD + '''

class GPT(nn.Linear):
    def configure_optimizers(self, lr):
        return torch.optim.AdamW(self.parameters(), lr=lr)


class Trainer:
    def __init__(self, model, loader):
        self.model, self.loader = model, loader

    def train(self, epochs):
        model = self.model
        raw_model = model.module if hasattr(model, "module") else model
        optimizer = raw_model.configure_optimizers(1e-2)
        for epoch in range(epochs):
            for x, y in self.loader:
                loss = F.mse_loss(model(x), y)
                model.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    Trainer(GPT(4, 1), loader).train(2)


if __name__ == "__main__":
    main()
'''


def test_the_model_behind_an_unwrapping_alias_is_the_one_wrapped(tmp_path: Path) -> None:
    """minGPT's ``raw_model = model.module if hasattr(model, "module") else model`` builds the optimizer; the
    forward runs through ``model``, so ``model`` is wrapped (wrapping ``raw_model`` left the forward unwrapped)."""
    migrated, report, code = migrate_script(tmp_path, MINGPT)
    assert "        model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n        raw_model = " in migrated, migrated
    assert "raw_model = DistributedDataParallel" not in migrated and code == 0, report


STYLE_TRANSFER = HEAD + '''

def main():
    features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    for p in features.parameters():
        p.requires_grad_(False)
    content = torch.rand(1, 3, 16, 16)
    image = content.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([image], lr=0.01)
    target = features(content)
    for step in range(10):
        optimizer.zero_grad()
        loss = F.mse_loss(features(image), target)
        loss.backward()
        optimizer.step()
    torch.save(image.detach(), "out.pt")


if __name__ == "__main__":
    main()
'''


def test_an_optimised_input_is_no_unnamed_model(tmp_path: Path) -> None:
    """Style transfer steps an image, not a model: no review that a model goes unwrapped."""
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP011", "-"], input=STYLE_TRANSFER, catch_exceptions=False)
    assert "DDP011" not in result.output, result.output
