"""Frozen and unfrozen parameters through a migration (DDP042, and where DDP011 puts the wrap).

DDP decides when it wraps a model which parameters it synchronises: those that require gradients then. A
trial's fine-tuning script froze its backbone after the wrap (the next step failed: "Expected to have
finished reduction") or unfroze it at some epoch after a wrap that saw it frozen (no error; the ranks'
backbones drifted apart, 48.76 against 40.85). A freeze before the training starts must come before the
wrap the migration inserts; a change after the wrap is left to a human, naming the call that makes it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from migrated import migrate_script

from ddp_migrate.cli import cli

HEADER = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.backbone(x)))


def set_backbone_trainable(model, flag):
    for param in model.backbone.parameters():
        param.requires_grad = flag


def main():
    torch.manual_seed(0)
    data, target = torch.randn(64, 4), torch.randn(64, 1)
    loader = DataLoader(TensorDataset(data, target), batch_size=8, shuffle=False)
    model = Net()
    set_backbone_trainable(model, False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
'''
TRAIN = '''        for x, y in loader:
            optimizer.zero_grad()
            x.requires_grad_(True)  # input gradients: no parameter of the model
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''
FROZEN = HEADER + TRAIN
UNFROZEN_LATER = HEADER + "        if epoch == 1:\n            set_backbone_trainable(model, True)\n" + TRAIN


def test_a_freeze_before_training_comes_before_the_wrap(tmp_path: Path) -> None:
    text, output, code = migrate_script(tmp_path, FROZEN)
    assert code == 0, output
    assert text.index("set_backbone_trainable(model, False)") < text.index("DistributedDataParallel(model")
    assert "DDP042" not in output


def test_an_unfreeze_after_the_wrap_is_left_to_a_human_naming_the_call(tmp_path: Path) -> None:
    text, output, code = migrate_script(tmp_path, UNFROZEN_LATER)
    assert code == 1, output
    reviews = [line for line in output.splitlines() if "DDP042" in line and line.lstrip().startswith("review ")]
    assert len(reviews) == 1, output
    assert "requires_grad of param changes where the model may already be wrapped" in reviews[0]
    assert "(through `set_backbone_trainable(model, True)`, line " in reviews[0]
    assert "TODO(ddp-migrate): requires_grad of param changes" in text


@pytest.mark.e2e
@pytest.mark.distributed
def test_the_migrated_frozen_backbone_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_python, run_torchrun

    text, output, _ = migrate_script(tmp_path, FROZEN)
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert (tmp_path / "final.pt").exists(), output
    done = run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


UNFREEZE_HELPER = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def set_trainable(model, flag):
    model.backbone.requires_grad_(flag)


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=16)
    model = nn.Sequential()
    model.backbone = nn.Linear(4, 8)
    model.head = nn.Linear(8, 2)
    set_trainable(model, False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        if epoch == 1:
            set_trainable(model, True)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


def test_unfreezing_through_a_helper_the_migration_unwraps_is_reviewed(tmp_path: Path) -> None:
    """``set_trainable(model, True)`` after the wrap, whose body the migration spells
    ``runtime.unwrap(model).backbone.requires_grad_(flag)``: the backbone's gradients would go unaveraged
    (a trial: the ranks' backbones drifted apart, exit 0); DDP042 reviews it."""
    _, report, code = migrate_script(tmp_path, UNFREEZE_HELPER)
    assert code == 1 and "DDP042 requires_grad of runtime.unwrap(model).backbone changes where the model may already be wrapped" in report, report


DISTILLER = '''
import torch.nn.functional as F


class Distiller:
    def __init__(self, student, teacher, opt):
        self.student, self.teacher, self.opt = student, teacher, opt
        for p in teacher.parameters():
            p.requires_grad_(False)

    def step(self, x, y):
        loss = F.mse_loss(self.student(x), self.teacher(x)) + F.cross_entropy(self.student(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
'''

DISTILL_TRAIN = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from distill import Distiller


def main():
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    teacher = nn.Linear(6, 3).to(device)
    student = nn.Linear(6, 3).to(device)
    x, y = torch.randn(48, 6), torch.randint(0, 3, (48,))
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    distiller = Distiller(student, teacher, opt)
    for epoch in range(2):
        for xb, yb in loader:
            distiller.step(xb.to(device), yb.to(device))
    torch.save(student.state_dict(), "student.pt")
    print("checksum", round(sum(float(v.sum()) for v in student.state_dict().values()), 5), flush=True)


if __name__ == "__main__":
    main()
'''


@pytest.mark.distributed
def test_a_model_handed_to_an_object_that_freezes_another_is_wrapped_before_it(tmp_path: Path) -> None:
    """A trial's ``Distiller(student, teacher, opt)`` froze the teacher in its constructor; the wrap went
    after it (a freeze comes first), so the distiller trained the unwrapped student: the ranks' students
    drifted apart (checksums -0.7838 and -0.3053), exit 0, nothing to review. The student is wrapped before
    it is handed over; the freeze of another model does not hold the wrap back."""
    from launch import run_python, run_torchrun

    original, migrated = tmp_path / "original", tmp_path / "migrated"
    for folder in (original, migrated):
        folder.mkdir()
        (folder / "distill.py").write_text(DISTILLER)
        (folder / "train.py").write_text(DISTILL_TRAIN)
    done = subprocess.run([sys.executable, "-m", "ddp_migrate", "train.py"], cwd=migrated, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (migrated / "train.py").read_text()
    assert text.index("student = DistributedDataParallel(student") < text.index("distiller = Distiller(student, teacher, opt)")
    expected = run_python(original / "train.py", cwd=original, timeout=120).output.split("checksum")[1].split()[0]
    launch = run_torchrun(migrated / "train.py", nproc_per_node=2, cwd=migrated, timeout=120)
    assert f"checksum {expected}" in launch.output, (expected, launch.output)


FINE_TUNER = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(4, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.backbone(x))


class FineTuner:
    def __init__(self, model, frozen, lr):
        self.model = model
        for p in frozen.parameters():
            p.requires_grad = False
        self.opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)

    def step(self, x, y):
        self.opt.zero_grad()
        F.mse_loss(self.model(x), y).backward()
        self.opt.step()


def main():
    model = Net()
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    HAND_OVER
    for epoch in range(2):
        for x, y in loader:
            tuner.step(x, y)


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    "hand_over",
    ["backbone = model.backbone\n    tuner = FineTuner(model, backbone, 0.1)", "tuner = FineTuner(model, model.backbone, 0.1)"],
    ids=["alias", "attribute"],
)
def test_a_model_handed_to_an_object_that_freezes_part_of_it_is_left_to_a_human(tmp_path: Path, hand_over: str) -> None:
    """``FineTuner(model, model.backbone)`` (or a name for the backbone) keeps the model and freezes part of
    it: the wrap must follow the freeze, but the object would train the unwrapped model (a review's trial:
    the ranks drifted apart, or "Expected to have finished reduction" with the wrap before it). No place is
    right, so nothing is wrapped and the hand-over is reviewed."""
    text, report, code = migrate_script(tmp_path, FINE_TUNER.replace("HAND_OVER", hand_over))
    assert code == 1, report
    assert "DistributedDataParallel(model" not in text
    assert "this hands model to an object and changes which of its parameters require gradients" in report, report


def test_a_hook_in_another_module_that_unfreezes_the_wrapped_model_is_reviewed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial: an mmcv-style hook unfroze the backbone through the Trainer it is handed; the ranks' weights
    # drifted apart (-2.66 / -2.15 against the original's -2.35) while the report said nothing.
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    monkeypatch.chdir(tmp_path)
    Path("hooks.py").write_text(
        "class Unfreeze:\n"
        "    def __init__(self, at):\n        self.at = at\n\n"
        "    def before_epoch(self, trainer):\n"
        "        trainer.model.backbone.requires_grad_(trainer.epoch >= self.at)\n"
    )
    Path("engine.py").write_text(
        "import torch.nn.functional as F\n\n\n"
        "class Trainer:\n"
        "    def __init__(self, model, optimizer, loader, hooks):\n"
        "        self.model, self.optimizer, self.loader, self.hooks, self.epoch = model, optimizer, loader, hooks, 0\n\n"
        "    def run(self, epochs):\n"
        "        for self.epoch in range(epochs):\n"
        "            for hook in self.hooks:\n"
        "                hook.before_epoch(self)\n"
        "            for x, y in self.loader:\n"
        "                self.optimizer.zero_grad()\n"
        "                F.mse_loss(self.model(x), y).backward()\n"
        "                self.optimizer.step()\n"
    )
    Path("train.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "from engine import Trainer\nfrom hooks import Unfreeze\n\n\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.backbone = nn.Linear(4, 4)\n        self.head = nn.Linear(4, 1)\n\n"
        "    def forward(self, x):\n        return self.head(self.backbone(x))\n\n\n"
        "def main():\n"
        "    model = Net()\n"
        "    model.backbone.requires_grad_(False)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n"
        "    Trainer(model, optimizer, loader, [Unfreeze(1)]).run(3)\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    reviews = [line for line in result.output.splitlines() if "review" in line and "DDP042" in line]
    assert len(reviews) == 1 and "hooks.py:" in reviews[0] and "requires_grad of runtime.unwrap(trainer.model).backbone changes" in reviews[0], result.output


BACKBONE = '''
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(10, 8)
        self.head = nn.Linear(8, 4)

    def freeze_backbone(self, frozen):
        for p in self.backbone.parameters():
            p.requires_grad = not frozen

    def forward(self, x):
        return self.head(self.backbone(x))
'''

UNFREEZING_ENTRY = '''
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from backbone import Net


def run():
    x = torch.randn(64, 10)
    loader = DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)
    model = Net()
    model.freeze_backbone(True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        if epoch == 1:
            model.freeze_backbone(False)
        for xb, t in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(xb), t).backward()
            optimizer.step()


if __name__ == "__main__":
    run()
'''


def test_a_change_reached_from_another_module_names_that_module_not_a_stale_line(tmp_path: Path) -> None:
    """A trial: the review in backbone.py pointed at "train, line 27", a line of train.py before the migration
    rewrote it (the call was at line 20 of the original, 31 of the result)."""
    (tmp_path / "backbone.py").write_text(BACKBONE)
    (tmp_path / "train.py").write_text(UNFREEZING_ENTRY)
    result = CliRunner().invoke(cli, [str(tmp_path)], catch_exceptions=False)
    review = next(line for line in result.output.splitlines() if "DDP042" in line)
    assert "(through `model.module.freeze_backbone(False)`, in train)" in review, result.output


NEVER_CALLED_FREEZE = """import torch
import torch.nn as nn


class Net(nn.Linear):
    def freeze(self):
        for p in self.parameters():
            p.requires_grad_(False)


def main():
    model = nn.DataParallel(Net(4, 2))
    USE
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("use", "reported"),
    [("pass", False), ("model.module.freeze()", True), ("hooks = [model.module.freeze]", True)],
    ids=["never-called", "called-after-the-wrap", "handed-on-as-a-callback"],
)
def test_a_method_the_program_never_runs_changes_nothing_after_the_wrap(tmp_path: Path, use: str, reported: bool) -> None:
    """A model's ``freeze()`` that no code of the program calls (a trial): DDP042 said requires_grad changes where
    the model may be wrapped, and the migration counted a review item for it."""
    (tmp_path / "train.py").write_text(NEVER_CALLED_FREEZE.replace("USE", use))
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP042", str(tmp_path / "train.py")]).output
    assert ("DDP042" in output) is reported, output


FROZEN_WHOLE_AFTER_THE_WRAP = """import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.fc.bias.requires_grad = False


def main():
    dist.init_process_group("gloo")
    student, teacher = DDP(Head()), DDP(Head())
    for p in teacher.parameters():
        p.requires_grad = FLAG
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    loss = ((student.module.fc(torch.randn(8, 4)) - teacher.module.fc(torch.randn(8, 4))) ** 2).mean()
    loss.backward()
    optimizer.step()
"""

MASTER_COPY = """import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def make_master_params(model):
    master = nn.Parameter(torch.cat([p.detach().float().view(-1) for p in model.parameters()]))
    master.requires_grad = True
    return [master]


def main():
    dist.init_process_group("gloo")
    model = DDP(nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
    master = make_master_params(model.module)
"""


@pytest.mark.parametrize(
    ("source", "reported"),
    [
        (FROZEN_WHOLE_AFTER_THE_WRAP.replace("FLAG", "False"), False),
        (FROZEN_WHOLE_AFTER_THE_WRAP.replace("FLAG", "True"), True),
        (MASTER_COPY, False),
    ],
    ids=["teacher-frozen-whole", "unfrozen-what-ddp-left-out", "new-master-parameter"],
)
def test_changes_ddp_has_no_say_in_are_not_reported(tmp_path: Path, source: str, reported: bool) -> None:
    """Trials on DINO and guided-diffusion (error-severity false findings): a teacher wrapped with one parameter
    frozen by its own ``__init__``, then frozen whole and never unfrozen (no hook of it fires again; unfreezing
    what DDP left out is the pitfall); and ``requires_grad`` of a new ``nn.Parameter`` made from copies of the
    parameters (fp16 training's master weights), none of the wrapped model's."""
    (tmp_path / "train.py").write_text(source)
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP042", str(tmp_path / "train.py")]).output
    assert ("DDP042" in output) is reported, output
