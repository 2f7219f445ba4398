"""The pre-commit hooks, for real: pre-commit clones this checkout, builds the hook environment, runs it.

A snapshot of the working tree (tracked and untracked files git does not ignore, so uncommitted changes
count) is committed into a throwaway repository, and a throwaway project points its
``.pre-commit-config.yaml`` at that commit. pre-commit then builds a virtualenv and pip-installs the hook
repository from the package registry; where the registry cannot be reached the tests are skipped with the
error that says so, never passed. ``PRE_COMMIT_HOME`` is one folder for the whole module, so the hook
environment is built once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
INSTALL_TIMEOUT = 900

DP_SCRIPT = """\
import torch
import torch.nn as nn

model = nn.DataParallel(model)
"""

CLEAN_SCRIPT = """\
import torch

x = torch.zeros(2)
"""

#: What pip prints when the package registry cannot be reached (then the test is skipped, not failed).
OFFLINE_MARKERS = (
    "Could not find a version that satisfies the requirement",
    "No matching distribution found",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Max retries exceeded",
    "ProxyError",
    "NewConnectionError",
    "Name or service not known",
)


def git(cwd: Path, *args: str) -> str:
    """Run git with no user configuration in the way (no hooks, no signing, a fixed identity)."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
    }
    done = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"git {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A committed snapshot of this checkout's working tree, and its commit."""
    pytest.importorskip("pre_commit", reason="pre-commit is not installed (pip install -e '.[test]')")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("the pre-commit test needs git and a git checkout of this repository")
    listed = git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    snapshot = tmp_path_factory.mktemp("hook-repo")
    for name in filter(None, listed):
        source = REPO / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    git(snapshot, "init", "-q")
    git(snapshot, "add", "-A")
    git(snapshot, "commit", "-q", "-m", "snapshot of the working tree")
    return snapshot, git(snapshot, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


def pre_commit(project: Path, home: Path, *args: str, timeout: int = INSTALL_TIMEOUT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never", "NO_COLOR": "1"}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args], cwd=project, env=env, capture_output=True, text=True, timeout=timeout
    )


def make_project(root: Path, hook_repo: tuple[Path, str], files: dict[str, str]) -> Path:
    """A git repository whose pre-commit configuration uses both hooks of the snapshot."""
    repo, rev = hook_repo
    root.mkdir(parents=True, exist_ok=True)
    (root / ".pre-commit-config.yaml").write_text(
        textwrap.dedent(
            f"""\
            repos:
              - repo: {repo}
                rev: {rev}
                hooks:
                  - id: ddp-migrate-lint
                  - id: ddp-migrate
            """
        )
    )
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    return root


def _registry_reachable(tmp: Path) -> str | None:
    """``None`` when pip can fetch from the package registry, else what pip said."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(tmp), "setuptools>=64"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return None if done.returncode == 0 else (done.stdout + done.stderr)[-2000:]


@pytest.fixture(scope="module")
def hook_env(tmp_path_factory: pytest.TempPathFactory, hook_repo: tuple[Path, str], pre_commit_home: Path) -> Path:
    """Install the hook environment once; skip (with pip's error) when the registry cannot be reached."""
    offline = _registry_reachable(tmp_path_factory.mktemp("pip-check"))
    if offline is not None:
        pytest.skip(f"pre-commit hook install needs the package registry, which pip cannot reach:\n{offline}")
    project = make_project(tmp_path_factory.mktemp("install") / "project", hook_repo, {"a.py": CLEAN_SCRIPT})
    done = pre_commit(project, pre_commit_home, "install-hooks")
    if done.returncode != 0:
        log = pre_commit_home / "pre-commit.log"
        output = done.stdout + done.stderr + (log.read_text(errors="replace") if log.exists() else "")
        if any(marker in output for marker in OFFLINE_MARKERS):
            pytest.skip(f"pre-commit could not install the hook environment from the registry:\n{output[-3000:]}")
        pytest.fail(f"pre-commit install-hooks failed:\n{output[-6000:]}")
    envs = sorted(pre_commit_home.glob("repo*/py_env-*"))
    assert len(envs) == 1, f"expected one hook environment for both hooks, found {envs}"
    return envs[0]


def test_hook_environment_has_the_command_line_and_no_torch(hook_env: Path) -> None:
    python = hook_env / "bin" / "python"
    assert (hook_env / "bin" / "ddp-migrate").exists()
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u, ddp_migrate.cli; print(u.find_spec('torch') is None, u.find_spec('libcst') is not None)"],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["True", "True"], "the hook environment must not contain torch"
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, timeout=120)
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert {"ddp-migrate", "libcst", "click"} <= names and "torch" not in names, names


def test_no_paths_is_a_silent_success_in_the_hook_environment(hook_env: Path, tmp_path: Path) -> None:
    for command in (["lint"], ["migrate"]):
        done = subprocess.run([str(hook_env / "bin" / "ddp-migrate"), *command], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_lint_hook_fails_on_a_pitfall(hook_env: Path, hook_repo: tuple[Path, str], pre_commit_home: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", hook_repo, {"train.py": DP_SCRIPT, "clean.py": CLEAN_SCRIPT, "notes.md": "# notes\n"})
    done = pre_commit(project, pre_commit_home, "run", "ddp-migrate-lint", "--all-files")
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "ddp-migrate lint" in output and "Failed" in output
    assert "train.py:4:9: DDP001 " in output
    assert not [line for line in output.splitlines() if line.startswith("clean.py:")]
    assert (project / "train.py").read_text() == DP_SCRIPT, "the lint hook never writes"


def test_lint_hook_passes_on_clean_code(hook_env: Path, hook_repo: tuple[Path, str], pre_commit_home: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", hook_repo, {"clean.py": CLEAN_SCRIPT, "pkg/mod.py": "import os\n"})
    done = pre_commit(project, pre_commit_home, "run", "ddp-migrate-lint", "--all-files")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Passed" in done.stdout


def test_hooks_are_skipped_without_python_files(hook_env: Path, hook_repo: tuple[Path, str], pre_commit_home: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", hook_repo, {"notes.md": "# notes\n"})
    done = pre_commit(project, pre_commit_home, "run", "--all-files")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no files to check" in done.stdout


def test_migrate_hook_rewrites_the_file(hook_env: Path, hook_repo: tuple[Path, str], pre_commit_home: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", hook_repo, {"train.py": DP_SCRIPT})
    done = pre_commit(project, pre_commit_home, "run", "ddp-migrate", "--all-files")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "files were modified by this hook" in done.stdout
    migrated = (project / "train.py").read_text()
    assert "DistributedDataParallel(model, device_ids=runtime.device_ids())" in migrated
    compile(migrated, "train.py", "exec")


def test_readme_local_hook_snippet_works_as_written(tmp_path: Path) -> None:
    """The README's ``repo: local`` configuration, copied verbatim, against the installed command line."""
    pytest.importorskip("pre_commit", reason="pre-commit is not installed (pip install -e '.[test]')")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Pre-commit", 1)[1]
    snippet = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "repo: local" in snippet
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pre-commit-config.yaml").write_text(snippet)
    (project / "train.py").write_text(DP_SCRIPT)
    (project / "clean.py").write_text(CLEAN_SCRIPT)
    git(project, "init", "-q")
    git(project, "add", "-A")
    env_path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "home"), "PRE_COMMIT_COLOR": "never", "NO_COLOR": "1", "PATH": env_path}
    done = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "train.py:4:9: DDP001 " in output and "Failed" in output
    (project / "train.py").write_text(CLEAN_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hooks_run_serially() -> None:
    yaml = pytest.importorskip("yaml")
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert {hook["id"]: hook["require_serial"] for hook in hooks} == {"ddp-migrate-lint": True, "ddp-migrate": True}
