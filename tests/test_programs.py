"""Programs, not files: how the files named on the command line become programs, and what migrating a
program does to each of its files (golden outputs per file, in ``fixtures/projects_expected/``).

Set ``DDP_MIGRATE_UPDATE_GOLDEN=1`` to rewrite the expected files after an intended change, then review
the diff like any other code change.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_python
from ddp_migrate.codemods import ALL_RULES
from ddp_migrate.codemods.base import Options
from ddp_migrate.program import plan, process_unit
from ddp_migrate.runner import run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PROJECTS = FIXTURES / "projects"
EXPECTED = FIXTURES / "projects_expected"
ENTRIES = {
    "refs_style": "train.py",
    "package_trainer": "run.py",
    "module_level": "train.py",
    "pkg_main": "app/main.py",
    "helper_init": "train.py",
    "with_tests": "train.py",
}
DEFAULT_RULES = [rule for rule in ALL_RULES if rule.enabled_by_default]


def copy_project(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(PROJECTS / name, target, ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
    return target


def python_files(folder: Path) -> list[Path]:
    return sorted(p.relative_to(folder) for p in folder.rglob("*.py"))


def migrate_tree(folder: Path, entry: str) -> dict[str, str]:
    """Migrate the program of one entry in process; the new text of every file it reported."""
    results = list(run([folder / entry], DEFAULT_RULES, Options(review_todos=True), fix=True, jobs=1))
    assert not [r.error for r in results if r.error]
    return {str(Path(r.path).resolve().relative_to(folder.resolve())): r.new_text for r in results}


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_program_golden(name: str, tmp_path: Path) -> None:
    folder = copy_project(name, tmp_path)
    migrated = migrate_tree(folder, ENTRIES[name])
    for relative in python_files(PROJECTS / name):
        key = str(relative)
        original = (PROJECTS / name / relative).read_text(encoding="utf-8")
        new = migrated.get(key, original)
        expected_path = EXPECTED / name / relative
        if os.environ.get("DDP_MIGRATE_UPDATE_GOLDEN"):
            if new != original:
                expected_path.parent.mkdir(parents=True, exist_ok=True)
                expected_path.write_text(new, encoding="utf-8", newline="")
            elif expected_path.exists():
                expected_path.unlink()
        expected = expected_path.read_text(encoding="utf-8") if expected_path.exists() else original
        assert new == expected, f"{name}/{relative}"


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_migrated_program_is_a_fixed_point(name: str, tmp_path: Path) -> None:
    folder = copy_project(name, tmp_path)
    for expected in (EXPECTED / name).rglob("*.py") if (EXPECTED / name).exists() else ():
        target = folder / expected.relative_to(EXPECTED / name)
        target.write_text(expected.read_text(encoding="utf-8"), encoding="utf-8")
    results = list(run([folder / ENTRIES[name]], DEFAULT_RULES, Options(), fix=True, jobs=1))
    assert not [r.error for r in results if r.error]
    assert not [r.path for r in results if r.changed]


def test_an_entry_brings_its_local_modules_and_not_its_tests() -> None:
    [unit] = plan([PROJECTS / "with_tests" / "train.py"])
    assert unit.entry == PROJECTS / "with_tests" / "train.py"
    assert {p.name for p in unit.paths} == {"train.py", "model.py"}
    assert unit.migrate == frozenset(unit.paths)


def test_a_folder_is_split_into_programs_and_files_no_entry_reaches() -> None:
    files = sorted((PROJECTS / "with_tests").rglob("*.py"))
    units = plan(files)
    programs = [u for u in units if u.entry is not None]
    others = [u for u in units if u.entry is None]
    assert [u.entry.name for u in programs] == ["train.py"]  # type: ignore[union-attr]
    assert [u.paths[0].name for u in others] == ["test_model.py"]
    assert others[0].why_not == "a test file"


def test_relative_imports_of_a_package_entry_resolve() -> None:
    [unit] = plan([PROJECTS / "pkg_main" / "app" / "main.py"])
    names = dict(unit.names)
    assert sorted(names.values()) == ["app", "app.loop", "app.main", "app.model"]


def test_programs_sharing_a_module_are_one_unit(tmp_path: Path) -> None:
    (tmp_path / "common.py").write_text("def helper(loss):\n    loss.backward()\n")
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("from common import helper\n\nif __name__ == '__main__':\n    helper(loss)\n")
    units = plan([tmp_path / "a.py", tmp_path / "b.py", tmp_path / "common.py"])
    assert len(units) == 1
    assert {p.name for p in units[0].paths} == {"a.py", "b.py", "common.py"}


def test_every_entry_of_programs_sharing_a_module_sets_up_its_own_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial: eval.py and train.py share common.py (which trains); only eval.py, the first entry, got the
    # set-up, and train.py failed with "Default process group has not been initialized" while the report
    # said nothing needed a human.

    monkeypatch.chdir(tmp_path)
    Path("common.py").write_text(
        "import torch\n\n\ndef make_model():\n    return torch.nn.Linear(8, 1)\n\n\n"
        "def train_steps(model, opt, n=3):\n    for _ in range(n):\n"
        "        loss = model(torch.randn(4, 8)).pow(2).mean()\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n"
    )
    Path("eval.py").write_text(
        "import torch\n\nfrom common import make_model\n\n\ndef main():\n    model = make_model()\n"
        "    print(model(torch.ones(1, 8)).item())\n\n\nif __name__ == '__main__':\n    main()\n"
    )
    Path("train.py").write_text(
        "import torch\n\nfrom common import make_model, train_steps\n\n\ndef main():\n    model = make_model()\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    train_steps(model, opt)\n    print('done')\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    result = CliRunner().invoke(cli, ["."], catch_exceptions=False)
    # (common.py's steps draw their batches with torch.randn, alike on every rank: the one review item)
    assert "1 item(s) need a human" in result.output and "review train.py:14:5: DDP040 this call trains" in result.output, result.output
    for entry in ("eval.py", "train.py"):
        assert "runtime.setup(" in Path(entry).read_text(), (entry, result.output)
        assert f"launch it with: torchrun --standalone --nproc_per_node=<processes> {entry}" in result.output
    assert "runtime.setup(" not in Path("common.py").read_text()
    run = run_python("train.py", timeout=120, check=False)
    assert run.returncode == 0 and "done" in run.stdout, run.stderr


def test_a_program_that_does_not_train_is_processed_file_by_file(tmp_path: Path) -> None:
    (tmp_path / "common.py").write_text("def helper():\n    return 1\n")
    (tmp_path / "a.py").write_text("from common import helper\n\nif __name__ == '__main__':\n    helper()\n")
    units = plan([tmp_path / "a.py", tmp_path / "common.py"])
    assert sorted(len(u.paths) for u in units) == [1, 1]


def test_no_follow_imports_migrates_only_the_named_files(tmp_path: Path) -> None:
    folder = copy_project("refs_style", tmp_path)
    [unit] = plan([folder / "train.py"], follow_imports=False)
    assert unit.migrate == frozenset({folder / "train.py"})
    results = process_unit(unit, lambda _p: DEFAULT_RULES, Options(), fix=True)
    changed = {Path(r.path).name for r in results if r.changed}
    assert changed == {"train.py"}


def test_a_library_module_alone_is_linted_not_migrated(tmp_path: Path) -> None:
    folder = copy_project("package_trainer", tmp_path)
    trainer = folder / "mlpkg" / "trainer.py"
    before = trainer.read_bytes()
    result = CliRunner().invoke(cli, ["migrate", str(trainer)])
    assert trainer.read_bytes() == before
    assert "not migrated" in result.output and "no entry script reaches" in result.output
    lint = CliRunner().invoke(cli, ["lint", str(trainer)])
    assert "DDP003" not in lint.output


def test_test_files_are_never_rewritten(tmp_path: Path) -> None:
    folder = copy_project("with_tests", tmp_path)
    test_file = folder / "tests" / "test_model.py"
    before = test_file.read_bytes()
    result = CliRunner().invoke(cli, ["migrate", str(folder)])
    assert result.exit_code in (0, 1), result.output
    assert test_file.read_bytes() == before
    assert (folder / "train.py").read_bytes() != (PROJECTS / "with_tests" / "train.py").read_bytes()


def test_one_setup_in_a_program_that_initialises_in_a_helper(tmp_path: Path) -> None:
    folder = copy_project("helper_init", tmp_path)
    migrate_tree(folder, "train.py")
    text = "".join(p.read_text() for p in folder.rglob("*.py"))
    assert "runtime.setup(" not in text
    assert text.count("init_process_group(") == 1


def test_a_group_the_program_never_destroys_is_cleaned_up_by_the_entry(tmp_path: Path) -> None:
    folder = copy_project("helper_init", tmp_path)
    result = CliRunner().invoke(cli, ["migrate", str(folder / "train.py")])
    assert result.exit_code == 0, result.output  # nothing left to a human
    train = (folder / "train.py").read_text()
    main = train[train.index("def main():") : train.index('if __name__ == "__main__":')]
    assert main.rstrip().endswith("runtime.cleanup()")
    assert "TODO" not in train  # args.distributed is set by the helper from the launch environment
    assert "DDP003" in result.output
    # Only the entry is launched; the helper module runs with it.
    assert "launch it with: torchrun --standalone --nproc_per_node=<processes> " in result.output
    assert not [line for line in result.output.splitlines() if "launch it with" in line and "dist_utils" in line]


def test_a_switch_a_helper_sets_without_the_launch_is_left_to_a_human(tmp_path: Path) -> None:
    folder = copy_project("helper_init", tmp_path)
    helper = folder / "dist_utils.py"
    text = helper.read_text()
    # The helper now decides from a flag of its own, not from the launcher's environment.
    text = text.replace('if "RANK" in os.environ and "WORLD_SIZE" in os.environ:', "if getattr(args, 'multi', False):")
    text = text.replace('args.rank = int(os.environ["RANK"])', "args.rank = 0").replace(
        'args.world_size = int(os.environ["WORLD_SIZE"])', "args.world_size = 1"
    )
    helper.write_text(text)
    result = CliRunner().invoke(cli, ["migrate", str(folder / "train.py")])
    assert result.exit_code == 1, result.output
    assert "TODO(ddp-migrate): make `args.distributed` true under torchrun" in (folder / "train.py").read_text()


def test_a_switch_set_under_a_launch_test_is_not_reported(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import os\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
        "def main():\n"
        "    use_ddp = False\n"
        '    if "WORLD_SIZE" in os.environ:\n'
        "        use_ddp = True\n"
        '        dist.init_process_group("gloo")\n'
        "    model = torch.nn.Linear(2, 1)\n"
        "    if use_ddp:\n"
        "        model = DDP(model)\n"
        "    model(torch.ones(1, 2)).sum().backward()\n"
        "    if use_ddp:\n"
        "        dist.destroy_process_group()\n\n\n"
        'if __name__ == "__main__":\n'
        "    main()\n"
    )
    result = CliRunner().invoke(cli, ["lint", str(script)])
    assert "DDP011" not in result.output, result.output


def test_each_module_is_indexed_once_per_change() -> None:
    """The program analysis is updated, not rebuilt: a module is indexed again only after a fix
    rewrote it (one libcst walk per module, plus one per accepted fix)."""
    from ddp_migrate.codemods.analysis.program import ModuleInfo, Program

    import libcst as cst

    [unit] = plan([PROJECTS / "refs_style" / "train.py"])
    names = dict(unit.names)
    modules = {
        str(p): (cst.parse_module(p.read_text()), ModuleInfo(names[p], p == unit.entry)) for p in unit.paths
    }
    program = Program(modules)
    assert program.index_builds == len(modules)
    key = str(unit.paths[1])
    program.replace(key, cst.parse_module(program.module(key).code + "\nX = 1\n"))
    assert program.index_builds == len(modules) + 1


def test_batchnorm_in_a_model_class_of_another_module_is_synced(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(
        "import torch.nn as nn\n\n\n"
        "class Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.bn = nn.BatchNorm1d(4)\n\n\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.block = Block()\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader\n\nfrom models import Net\n\n\n"
        "def main():\n    loader = DataLoader(data, batch_size=8, shuffle=True)\n    model = Net()\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for epoch in range(2):\n        for x, y in loader:\n            model(x).sum().backward()\n            opt.step()\n\n\n"
        'if __name__ == "__main__":\n    main()\n'
    )
    result = CliRunner().invoke(cli, ["migrate", str(tmp_path / "train.py")])
    assert "DDP030" in result.output, result.output
    train = (tmp_path / "train.py").read_text()
    assert train.index("model = runtime.convert_sync_batchnorm(model)") < train.index("DistributedDataParallel(model")


def test_the_plans_path_resolution_is_path_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan resolves a file through its folder, once per folder: the same path as ``Path.resolve()``
    for plain files, relative paths, ``..``, linked folders and linked files."""
    from ddp_migrate.program import _Scanner

    real = tmp_path / "real"
    (real / "pkg").mkdir(parents=True)
    (real / "pkg" / "mod.py").write_text("x = 1\n")
    (real / "other.py").write_text("y = 2\n")
    (tmp_path / "linked").symlink_to(real, target_is_directory=True)
    (real / "alias.py").symlink_to(real / "pkg" / "mod.py")
    monkeypatch.chdir(real)
    paths = [
        real / "pkg" / "mod.py",
        tmp_path / "linked" / "pkg" / "mod.py",
        tmp_path / "linked" / "other.py",
        real / "alias.py",
        Path("pkg/mod.py"),
        Path("pkg/../other.py"),
        Path("pkg/.."),
        Path("missing.py"),
    ]
    scanner = _Scanner()
    assert [scanner.resolve(p) for p in paths] == [p.resolve() for p in paths]
    assert scanner.resolve(real / "alias.py") == real / "pkg" / "mod.py"


def test_modules_reached_through_imports_are_named_the_way_the_entry_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One report names a program's files alike: an entry given relative to the working folder brings its
    imported modules relative too (they were full paths beside a relative entry); an entry given by its full
    path brings full paths."""
    folder = copy_project("refs_style", tmp_path)
    monkeypatch.chdir(tmp_path)
    relative = CliRunner().invoke(cli, ["lint", f"refs_style/{ENTRIES['refs_style']}"])
    named = {line.split(":")[0] for line in relative.output.splitlines() if ": DDP" in line}
    assert len(named) > 1 and all(not Path(p).is_absolute() and p.startswith("refs_style/") for p in named), named
    absolute = CliRunner().invoke(cli, ["lint", str(folder / ENTRIES["refs_style"])])
    named = {line.split(":")[0] for line in absolute.output.splitlines() if ": DDP" in line}
    assert len(named) > 1 and all(Path(p).is_absolute() for p in named), named


def test_a_function_handed_the_wrapped_model_and_a_plain_copy_reaches_both_through_unwrap(tmp_path: Path) -> None:
    # evaluate() in another module gets the model (wrapped by the migration) and its EMA copy (never
    # wrapped): .module would fail on the copy (a trial's AttributeError), runtime.unwrap serves both.
    (tmp_path / "engine.py").write_text(
        "import torch\n\n\n"
        "def evaluate(model, loader):\n"
        "    correct = 0\n"
        "    for x, y in loader:\n"
        "        correct += (model(x).argmax(1) == y).sum().item()\n"
        "    print(model.num_classes, correct)\n\n\n"
        "def train_one_epoch(model, loader, optimizer):\n"
        "    for x, y in loader:\n"
        "        optimizer.zero_grad()\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
    )
    (tmp_path / "train.py").write_text(
        "import copy\n\n"
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n\n"
        "from engine import evaluate, train_one_epoch\n\n\n"
        "class Net(torch.nn.Linear):\n"
        "    num_classes = 4\n\n\n"
        "def main():\n"
        "    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))\n"
        "    loader = DataLoader(data, batch_size=8, shuffle=True)\n"
        "    model = Net(8, 4)\n"
        "    ema = copy.deepcopy(model)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for epoch in range(2):\n"
        "        train_one_epoch(model, loader, optimizer)\n"
        "        evaluate(model, loader)\n"
        "        evaluate(ema, loader)\n\n\n"
        'if __name__ == "__main__":\n'
        "    main()\n"
    )
    migrated = migrate_tree(tmp_path, "train.py")
    assert "DistributedDataParallel(model" in migrated["train.py"]
    assert "(runtime.unwrap(model).num_classes, correct)" in migrated["engine.py"]
    assert ".module" not in migrated["engine.py"]
    # Handed the wrapped model only, the same access goes through .module as before.
    (tmp_path / "train.py").write_text((tmp_path / "train.py").read_text().replace("        evaluate(ema, loader)\n", ""))
    migrated = migrate_tree(tmp_path, "train.py")
    assert "(model.module.num_classes, correct)" in migrated["engine.py"]


def test_a_model_whose_parameters_reach_the_optimizer_through_a_parameter_is_wrapped(tmp_path: Path) -> None:
    # The optimizer is built in a helper from what its caller passes: the data was sharded while the model
    # stayed unwrapped (each rank trained its own model, a trial's silent wrong).
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n\n\n"
        "def train_stage(model, params, loader, epochs):\n"
        "    optimizer = torch.optim.Adam(params, lr=1e-3)\n"
        "    for epoch in range(epochs):\n"
        "        for x, y in loader:\n"
        "            optimizer.zero_grad()\n"
        "            torch.nn.functional.mse_loss(model(x), y).backward()\n"
        "            optimizer.step()\n\n\n"
        "def main():\n"
        "    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8, shuffle=True)\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))\n"
        "    train_stage(model, model[1].parameters(), loader, 1)\n"
        "    train_stage(model, model.parameters(), loader, 2)\n\n\n"
        'if __name__ == "__main__":\n'
        "    main()\n"
    )
    migrated = migrate_tree(tmp_path, "train.py")["train.py"]
    assert "model = DistributedDataParallel(model, device_ids=runtime.device_ids())" in migrated
    # The wrapper cannot be indexed: the Sequential's layer is reached through .module.
    assert "train_stage(model, model.module[1].parameters(), loader, 1)" in migrated


def test_a_package_entry_that_imports_relatively_is_launched_as_a_module(tmp_path: Path) -> None:
    """``pkg/train.py`` with ``from .engine import train_one_epoch`` runs only as ``-m pkg.train``: the
    launch line says so (it named the file, which fails with 'attempted relative import')."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "engine.py").write_text(
        "def train_one_epoch(model, optimizer, loader):\n"
        "    for x, y in loader:\n"
        "        optimizer.zero_grad()\n"
        "        ((model(x) - y) ** 2).mean().backward()\n"
        "        optimizer.step()\n"
    )
    (package / "train.py").write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "from .engine import train_one_epoch\n\n\n"
        "def main():\n"
        "    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)\n"
        "    model = torch.nn.Linear(4, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for epoch in range(2):\n"
        "        train_one_epoch(model, optimizer, loader)\n\n\n"
        'if __name__ == "__main__":\n'
        "    main()\n"
    )
    result = CliRunner().invoke(cli, ["migrate", str(package / "train.py")])
    assert f"launch it with: torchrun --standalone --nproc_per_node=<processes> -m pkg.train (from {tmp_path})" in result.output, result.output


@pytest.mark.parametrize("with_init", [True, False], ids=["package", "namespace-package"])
def test_a_packages_main_module_is_launched_as_the_package(tmp_path: Path, with_init: bool) -> None:
    """``python -m proj`` runs ``proj/__main__.py`` (``from .train import main``): the launch line named the file,
    which fails with 'attempted relative import with no known parent package'."""
    package = tmp_path / "proj"
    package.mkdir()
    if with_init:
        (package / "__init__.py").write_text("")
    (package / "train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
        "def main():\n"
        "    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)\n"
        "    model = torch.nn.Linear(4, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for epoch in range(2):\n"
        "        for x, y in loader:\n"
        "            optimizer.zero_grad()\n"
        "            ((model(x) - y) ** 2).mean().backward()\n"
        "            optimizer.step()\n"
    )
    (package / "__main__.py").write_text('from .train import main\n\nif __name__ == "__main__":\n    main()\n')
    result = CliRunner().invoke(cli, ["migrate", str(package)])
    assert f"launch it with: torchrun --standalone --nproc_per_node=<processes> -m proj (from {tmp_path})" in result.output, result.output


def test_a_test_file_that_trains_leaves_nothing_for_a_human_in_a_migration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial: a repository's tests called backward() and saved; their lint findings came back as review items
    # of every migration, so --check never passed on the migrated repository. lint still reports them.
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef main():\n"
        "    loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4, shuffle=True)\n"
        "    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for epoch in range(2):\n        for x, y in loader:\n            opt.zero_grad()\n"
        "            torch.nn.functional.mse_loss(model(x), y).backward()\n            opt.step()\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    Path("tests").mkdir()
    test_source = (
        "import torch\n\n\ndef test_a_step(tmp_path):\n    model = torch.nn.Linear(2, 1)\n"
        "    model(torch.randn(3, 2)).sum().backward()\n    torch.save(model.state_dict(), tmp_path / 'm.pt')\n"
    )
    Path("tests/test_model.py").write_text(test_source)
    migrated = CliRunner().invoke(cli, ["."], catch_exceptions=False)
    assert migrated.exit_code == 0, migrated.output
    assert "not migrated: a test file" in migrated.output and "review tests" not in migrated.output, migrated.output
    assert CliRunner().invoke(cli, ["--check", "."], catch_exceptions=False).exit_code == 0
    assert Path("tests/test_model.py").read_text() == test_source
    assert "tests/test_model.py:" in CliRunner().invoke(cli, ["lint", "tests"]).output


def test_the_launch_line_waits_for_the_review_items_of_the_programs_modules(tmp_path: Path) -> None:
    # (a trial on minGPT: the review items were in trainer.py, and the entry's launch line said nothing of them)
    (tmp_path / "trainer.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, RandomSampler\n\n\n"
        "def train(model, dataset):\n"
        "    loader = DataLoader(dataset, batch_size=4, sampler=RandomSampler(dataset, replacement=True, num_samples=16))\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for (x,) in loader:\n        opt.zero_grad()\n"
        "        model(x).mean().backward()\n        opt.step()\n"
    )
    (tmp_path / "main.py").write_text(
        "import torch\nfrom torch.utils.data import TensorDataset\n\nfrom trainer import train\n\n\n"
        "def main():\n    model = torch.nn.Linear(4, 1)\n    train(model, TensorDataset(torch.randn(16, 4)))\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    output = CliRunner().invoke(cli, [str(tmp_path / "main.py")]).output
    assert "review " in output and "(once the review items of its modules are done)" in output, output


def test_two_entries_sharing_a_model_factory_each_wrap_their_model(tmp_path: Path) -> None:
    # (a review: ``a.py`` and ``b.py`` both train ``make_model()`` of ``common.py``; a.py's wrap counted as b.py's,
    # and b.py trained unwrapped on its shard with nothing in the report)
    (tmp_path / "common.py").write_text("import torch.nn as nn\n\n\ndef make_model():\n    return nn.Linear(4, 1)\n")
    entry = (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom common import make_model\n\n"
        "loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)\nmodel = make_model()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\nfor epoch in range(2):\n    for x, y in loader:\n"
        "        opt.zero_grad()\n        nn.functional.mse_loss(model(x), y).backward()\n        opt.step()\n"
    )
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(entry)
    result = CliRunner().invoke(cli, [str(tmp_path)])
    for name in ("a.py", "b.py"):
        assert "model = DistributedDataParallel(model" in (tmp_path / name).read_text(), result.output
