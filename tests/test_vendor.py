"""``Options(runtime_module="ddp_runtime")`` and :func:`ddp_migrate.vendor.write_runtime_module`: migrated code
that imports a runtime module written beside it, and trains where ddp-migrate is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.base import Options
from ddp_migrate.codemods.names import VENDORED_RUNTIME, runtime
from ddp_migrate.engine import process
from ddp_migrate.registry import all_rules, without_lint_only
from ddp_migrate.vendor import HEADER_PREFIX, VendorError, write_runtime_module

VENDORED = Options(runtime_module=VENDORED_RUNTIME)

DP_SCRIPT = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 2))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = nn.DataParallel(nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("epoch", epoch, "loss", round(loss.item(), 4))
    torch.save(model.state_dict(), "model.pt")
    print("trained")
    """
)


def migrate(text: str, options: Options = VENDORED) -> str:
    result = process("train.py", text.encode(), without_lint_only(list(all_rules())), options, fix=True)
    assert result.error is None, result.error
    return result.new_text


def test_migration_imports_the_vendored_runtime_and_is_a_fixed_point() -> None:
    migrated = migrate(DP_SCRIPT)
    assert "import ddp_runtime as runtime\n" in migrated
    assert "ddp_migrate" not in migrated
    assert "runtime.setup(" in migrated and "DistributedDataParallel(" in migrated
    assert migrate(migrated) == migrated
    # A file already on the vendored runtime stays on it, and one on the package stays on the package.
    assert migrate(migrated, Options()) == migrated
    packaged = migrate(DP_SCRIPT, Options())
    assert "from ddp_migrate import runtime\n" in packaged and "ddp_runtime" not in packaged
    assert migrate(packaged) == packaged
    # The same code; the import sits where isort puts it: with the third party (the package) or in the
    # first-party group after it (the module written beside the program).
    assert _code_lines(packaged) == _code_lines(migrated)
    assert "\n\nimport ddp_runtime as runtime\n" in migrated


def _code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith(("import ", "from "))]


def test_a_taken_runtime_name_gets_the_module_name() -> None:
    migrated = migrate("import torch.nn as nn\nruntime = 1\nmodel = nn.DataParallel(nn.Linear(2, 2))\n")
    assert "import ddp_runtime\n" in migrated and "device_ids=ddp_runtime.device_ids()" in migrated
    assert migrate(migrated) == migrated


def test_the_analysis_reads_both_spellings_as_the_runtime() -> None:
    for source, alias in (
        ("import ddp_runtime as rt\nrt.setup()\n", "rt"),
        ("import ddp_runtime\nddp_runtime.setup()\n", "ddp_runtime"),
        ("from ddp_runtime import setup\nsetup()\n", None),
        ("from ddp_migrate import runtime\nruntime.setup()\n", "runtime"),
    ):
        analysis = ScriptAnalysis(cst.parse_module(source))
        assert analysis.calls_to({runtime("setup")}), source
        if alias:
            assert analysis.runtime_alias == alias


def test_lint_finds_no_missing_process_group_in_vendored_output(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(migrate(DP_SCRIPT))
    result = CliRunner().invoke(cli, ["lint", str(script)], catch_exceptions=False)
    assert "DDP003" not in result.output, result.output
    assert result.exit_code == 0, result.output


BLOCK_PACKAGE = "import sys; sys.modules['ddp_migrate'] = None; import runpy; runpy.run_path('train.py', run_name='__main__')"


def _clean_environment() -> dict[str, str]:
    launcher = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH"}
    return {key: value for key, value in os.environ.items() if key not in launcher and not key.startswith("TORCHELASTIC")}


def test_vendored_program_trains_without_ddp_migrate(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(migrate(DP_SCRIPT))
    written = write_runtime_module(tmp_path)
    assert written == tmp_path / "ddp_runtime.py"
    assert written.read_text().startswith(HEADER_PREFIX)
    # The guard proves the package is out of reach: importing it under the guard fails.
    blocked = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['ddp_migrate'] = None; import ddp_migrate"],
        cwd=tmp_path, env=_clean_environment(), capture_output=True, text=True, timeout=120,
    )
    assert blocked.returncode != 0 and "ModuleNotFoundError" in blocked.stderr
    run = subprocess.run(
        [sys.executable, "-c", BLOCK_PACKAGE], cwd=tmp_path, env=_clean_environment(), capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "trained" in run.stdout and "epoch 1 loss" in run.stdout
    assert (tmp_path / "model.pt").exists()


def test_rewriting_its_own_module_is_fine_and_a_foreign_one_is_an_error(tmp_path: Path) -> None:
    first = write_runtime_module(tmp_path)
    text = first.read_text()
    first.write_text(text.replace("import os\n", "import os  # touched\n", 1))
    assert write_runtime_module(tmp_path).read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["ddp_runtime.py"]  # no temporary file left behind

    foreign = tmp_path / "other"
    foreign.mkdir()
    (foreign / "ddp_runtime.py").write_text("# my own helpers\nVALUE = 1\n")
    with pytest.raises(VendorError, match="not written by ddp-migrate"):
        write_runtime_module(foreign)
    assert (foreign / "ddp_runtime.py").read_text() == "# my own helpers\nVALUE = 1\n"

    package = tmp_path / "pkg"
    (package / "ddp_runtime").mkdir(parents=True)
    with pytest.raises(VendorError, match="would be imported instead"):
        write_runtime_module(package)


def test_vendored_module_exports_what_the_package_exports(tmp_path: Path) -> None:
    import ddp_migrate.runtime as package

    written = write_runtime_module(tmp_path)
    namespace: dict[str, object] = {"__name__": "ddp_runtime"}
    exec(compile(written.read_text(), str(written), "exec"), namespace)
    assert namespace["__all__"] == package.__all__
    assert all(name in namespace for name in package.__all__)
