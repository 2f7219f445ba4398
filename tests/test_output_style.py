"""Migrated code that formatters and linters accept (issue 12, item 2).

Over every golden output (``fixtures/expected/`` and ``fixtures/projects_expected/``):

- an original that passes ``ruff check --select I`` (isort) migrates into a file that still passes: the
  imports a migration adds go where isort puts them;
- every line the migration wrote is within the line length (88: the fixtures set none), except a comment
  or a lone string literal, which black does not split either.

And the layout rules themselves (:mod:`ddp_migrate.layout`, :mod:`ddp_migrate.codemods.import_order`) on
small programs: the project's ``line-length``, the user's layout and comments kept, what is never split.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_migrate.codemods import ALL_RULES
from ddp_migrate.codemods.base import Options
from ddp_migrate.engine import process
from ddp_migrate.layout import DEFAULT_LINE_LENGTH, line_length_for, wrap_new_lines

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SINGLE = sorted([*FIXTURES.glob("scripts/*.py"), *FIXTURES.glob("cases/*.py"), *FIXTURES.glob("legacy/*.py")])
PROJECTS = sorted(p for p in (FIXTURES / "projects").iterdir() if p.is_dir())


def _ruff_isort(folder: Path, files: list[Path]) -> dict[Path, bool]:
    """Whether each file passes ``ruff check --select I``, run in ``folder`` as a project of its own."""
    command = [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "I", "--quiet", "--no-cache"]
    return {
        file: subprocess.run([*command, str(file)], cwd=folder, capture_output=True, timeout=60).returncode == 0
        for file in files
    }


def _pairs(tmp_path: Path) -> list[tuple[str, Path, Path, Path]]:
    """(name, folder, original copy, migrated copy) for every golden output, each in a project folder."""
    pairs = []
    for source in SINGLE:
        expected = FIXTURES / "expected" / source.name
        for kind, text in (("original", source), ("migrated", expected)):
            folder = tmp_path / kind / source.stem
            folder.mkdir(parents=True)
            shutil.copy(text, folder / source.name)
        pairs.append((source.name, tmp_path, tmp_path / "original" / source.stem / source.name, tmp_path / "migrated" / source.stem / source.name))
    for project in PROJECTS:
        for kind in ("original", "migrated"):
            shutil.copytree(project, tmp_path / kind / project.name, ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
        expected_root = FIXTURES / "projects_expected" / project.name
        for expected in expected_root.rglob("*.py"):
            relative = expected.relative_to(expected_root)
            shutil.copy(expected, tmp_path / "migrated" / project.name / relative)
            pairs.append((f"{project.name}/{relative}", tmp_path, tmp_path / "original" / project.name / relative, tmp_path / "migrated" / project.name / relative))
    return pairs


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Path, Path, Path]]:
    if subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode != 0:
        pytest.skip("ruff is not installed (it is a test dependency: pip install -e '.[test]')")
    return _pairs(tmp_path_factory.mktemp("style"))


def test_imports_stay_sorted_where_the_original_was(pairs) -> None:
    checked = 0
    failures = []
    for name, _, original, migrated in pairs:
        # ruff decides first party from the project folder: run it in the folder of each copy.
        before = _ruff_isort(_project_folder(original), [original])[original]
        after = _ruff_isort(_project_folder(migrated), [migrated])[migrated]
        if before:
            checked += 1
            if not after:
                failures.append(name)
    assert checked >= 20, f"only {checked} originals pass isort: the check lost its subject"
    assert not failures, f"imports no longer sorted after migration: {failures}"


def _project_folder(path: Path) -> Path:
    """The copy's project folder: ``<tmp>/<kind>/<project>``."""
    for parent in path.parents:
        if parent.parent.name in ("original", "migrated"):
            return parent
    return path.parent


def test_lines_the_migration_wrote_fit_the_line_length(pairs) -> None:
    long_lines = []
    for name, _, original, migrated in pairs:
        old = set(original.read_text(encoding="utf-8").splitlines())
        for number, line in enumerate(migrated.read_text(encoding="utf-8").splitlines(), 1):
            if line in old or len(line) <= DEFAULT_LINE_LENGTH or _unsplittable(line):
                continue
            long_lines.append(f"{name}:{number}: {len(line)} characters: {line.strip()[:60]}")
    assert not long_lines, "\n".join(long_lines)


def _unsplittable(line: str) -> bool:
    """A comment, or a lone string literal (with a trailing comma or closing bracket): black leaves it long."""
    text = line.strip()
    if text.startswith("#"):
        return True
    text = text.rstrip(",)")
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, (ast.Constant, ast.JoinedStr))


# --------------------------------------------------------------------- the layout rules on small programs

LONG_LOADER = (
    "import torch\n"
    "from torch.utils.data import DataLoader\n\n"
    "def main():\n"
    "    loader = DataLoader(train_set, batch_size=64, shuffle=True)  # the training data\n"
    "    for x, y in loader:\n"
    "        model(x).sum().backward()\n"
)


def migrate(text: str, path: str = "train.py") -> str:
    result = process(path, text.encode(), ALL_RULES, Options(), fix=True)
    assert result.error is None, result.error
    return result.new_text


def test_the_project_line_length_comes_from_ruff_or_black(tmp_path: Path) -> None:
    assert line_length_for(str(tmp_path / "train.py")) == DEFAULT_LINE_LENGTH == 88
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 100\n")
    sub = tmp_path / "pkg"
    sub.mkdir()
    assert line_length_for(str(sub / "train.py")) == 100
    ruff_sub = tmp_path / "ruff_pkg"
    ruff_sub.mkdir()
    (ruff_sub / "ruff.toml").write_text("line-length = 120\n")
    assert line_length_for(str(ruff_sub / "train.py")) == 120


def test_a_new_long_line_is_split_as_black_splits_it() -> None:
    original = "def f():\n    pass\n"
    text = (
        "def f():\n"
        "    loader = DataLoader(train_set, batch_size=runtime.per_process_batch_size(64), sampler=DistributedSampler(train_set, shuffle=True))\n"
    )
    wrapped = wrap_new_lines(original, text, 88)
    assert wrapped.text == (
        "def f():\n"
        "    loader = DataLoader(\n"
        "        train_set,\n"
        "        batch_size=runtime.per_process_batch_size(64),\n"
        "        sampler=DistributedSampler(train_set, shuffle=True),\n"
        "    )\n"
    )
    assert wrapped.start(2) == 2 and wrapped.end(2) == 6


def test_an_operator_expression_is_parenthesised_and_split_at_its_operators() -> None:
    text = 'device = runtime.device() if torch.cuda.is_available() and args.gpu is not None else torch.device("cpu")\n'
    assert wrap_new_lines("", text, 88).text == (
        "device = (\n"
        "    runtime.device()\n"
        "    if torch.cuda.is_available() and args.gpu is not None\n"
        '    else torch.device("cpu")\n'
        ")\n"
    )


def test_an_implicitly_concatenated_string_keeps_a_line_per_part() -> None:
    """A trial's print over two lines (``print(f"Epoch ..." \\n f"lr ...")``) became ``runtime.print0(`` with both
    parts joined on one 131-column line; black keeps each part on a line of its own."""
    original = 'for i in range(3):\n    print(f"Epoch: [{epoch}] [{i}/{len(data_loader)}] loss {loss.item():.4f} [{i}/{len(data_loader)}] "\n          f"lr {lr:.4f}")\n'
    text = 'for i in range(3):\n    runtime.print0(f"Epoch: [{epoch}] [{i}/{len(data_loader)}] loss {loss.item():.4f} [{i}/{len(data_loader)}] " f"lr {lr:.4f}")\n'
    assert wrap_new_lines(original, text, 88).text == (
        "for i in range(3):\n"
        "    runtime.print0(\n"
        '        f"Epoch: [{epoch}] [{i}/{len(data_loader)}] loss {loss.item():.4f} [{i}/{len(data_loader)}] "\n'
        '        f"lr {lr:.4f}"\n'
        "    )\n"
    )
    short = 'runtime.print0(some_function_name(argument_one, argument_two), "a part " "and another part", x)\n'
    assert '"a part " "and another part", x\n' in wrap_new_lines("", short, 88).text  # (a part that fits stays whole)


def test_a_comprehension_is_split_at_its_clauses() -> None:
    """A trial's resume line (``load_state_dict({k.removeprefix("module."): v for k, v in torch.load(...)...})``) stayed
    151 columns long: comprehensions were kept whole. black cuts before each ``for`` and filtering ``if``, then splits a
    clause still too long at its last bracket."""
    text = 'def resume(self, path):\n        self.model.load_state_dict({k.removeprefix("module."): v for k, v in torch.load(path, map_location=runtime.device())["model_state"].items()})\n'
    assert wrap_new_lines("", text, 88).text == (
        "def resume(self, path):\n"
        "        self.model.load_state_dict(\n"
        "            {\n"
        '                k.removeprefix("module."): v\n'
        "                for k, v in torch.load(path, map_location=runtime.device())[\n"
        '                    "model_state"\n'
        "                ].items()\n"
        "            }\n"
        "        )\n"
    )
    text = "total = sum(very_long_function_name(element, another_argument) for element in some_iterable_name if element is not None)\n"
    assert wrap_new_lines("", text, 88).text == (
        "total = sum(\n"
        "    very_long_function_name(element, another_argument)\n"
        "    for element in some_iterable_name\n"
        "    if element is not None\n"
        ")\n"
    )


def test_the_users_lines_comments_and_lambdas_are_left_alone() -> None:
    long_user_line = "x = some_function_with_a_long_name(first_argument, second_argument, third_argument_here, 4)\n"
    assert wrap_new_lines(long_user_line, long_user_line, 88).text == long_user_line
    commented = "x = some_function_with_a_long_name(first_argument, second_argument, third_argument_x)  # why\n"
    assert wrap_new_lines("", commented, 88).text == commented
    text = "x = some_function_with_a_long_name(lambda a, b: a + b, second_argument, third_argument_here)\n"
    wrapped = wrap_new_lines("", text, 88).text
    compile(wrapped, "x.py", "exec")
    assert "lambda a, b: a + b, second_argument, third_argument_here" in wrapped


def test_a_multi_line_call_keeps_its_layout_while_its_lines_fit() -> None:
    original = "import torch\nfrom torch.utils.data import DataLoader\n\nloader = DataLoader(\n    train_set,\n    batch_size=64,  # per GPU\n    shuffle=True,\n)\nfor x, y in loader:\n    model(x).sum().backward()\n"
    migrated = migrate(original)
    assert "    batch_size=runtime.per_process_batch_size(64),  # per GPU\n" in migrated
    assert "loader = DataLoader(\n    train_set,\n" in migrated


def test_a_trailing_comment_on_a_rewritten_line_is_kept() -> None:
    migrated = migrate(LONG_LOADER)
    assert "# the training data" in migrated
    compile(migrated, "train.py", "exec")


def test_a_project_line_length_is_used(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 200\n")
    source = "import torch\nfrom torch.utils.data import DataLoader\n\nloader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)\nfor x, y in loader:\n    model(x).sum().backward()\n"
    wide = migrate(source, str(tmp_path / "train.py"))
    narrow = migrate(source, str(tmp_path.parent / "elsewhere.py"))
    assert "loader = DataLoader(train_set, batch_size=runtime.per_process_batch_size(64)" in wide
    assert "loader = DataLoader(\n" in narrow


@pytest.mark.parametrize(
    ("source", "expected_imports"),
    [
        pytest.param(
            '"""Doc."""\n\nimport os\n\nimport helpers\n\nloss.backward()\n',
            '"""Doc."""\n\nimport os\n\nfrom ddp_migrate import runtime\n\nimport helpers\n',
            id="third-party-group-opened-between-stdlib-and-first-party",
        ),
        pytest.param(
            "from __future__ import annotations\n\nloss.backward()\n",
            "from __future__ import annotations\n\nfrom ddp_migrate import runtime\n",
            id="after-future",
        ),
        pytest.param(
            "import os\n\nimport numpy as np\nimport torch\nfrom torch import nn\n\nloss.backward()\n",
            "import os\n\nimport numpy as np\nimport torch\nfrom ddp_migrate import runtime\nfrom torch import nn\n",
            id="sorted-into-third-party",
        ),
    ],
)
def test_the_runtime_import_goes_where_isort_puts_it(source: str, expected_imports: str) -> None:
    migrated = migrate(source)
    assert migrated.startswith(expected_imports), migrated


def test_rule_examples_keep_sorted_imports_and_the_line_length(tmp_path: Path) -> None:
    """The rules' own before/after examples (the documentation) follow the same two rules."""
    if subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode != 0:
        pytest.skip("ruff is not installed (it is a test dependency: pip install -e '.[test]')")
    from ddp_migrate.codemods.base import Example

    files: list[tuple[str, Path, Path]] = []
    for rule in ALL_RULES:
        for index, example in enumerate(rule.examples):
            if isinstance(example, Example) and example.after is not None:
                before, after = tmp_path / f"{rule.code}_{index}_before.py", tmp_path / f"{rule.code}_{index}_after.py"
                before.write_text(example.before, encoding="utf-8")
                after.write_text(example.after, encoding="utf-8")
                files.append((f"{rule.code} example {index}", before, after))
    sorted_ok = _ruff_isort(tmp_path, [path for _, before, after in files for path in (before, after)])
    unsorted = [name for name, before, after in files if sorted_ok[before] and not sorted_ok[after]]
    assert sum(sorted_ok[before] for _, before, _ in files) >= 20
    assert not unsorted, f"examples whose imports the fix unsorts: {unsorted}"
    long_lines = [
        f"{name}: {line.strip()[:60]}"
        for name, before, after in files
        for line in after.read_text(encoding="utf-8").splitlines()
        if line not in set(before.read_text(encoding="utf-8").splitlines())
        and len(line) > DEFAULT_LINE_LENGTH
        and not _unsplittable(line)
    ]
    assert not long_lines, "\n".join(long_lines)
