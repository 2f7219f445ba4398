"""``runtime.Snapshot`` in this process: what it keeps, where it resumes, who writes it and how.

The launched behaviour (a worker killed under ``torchrun --max-restarts``, a resume with another
world size) is in test_elastic.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from ddp_migrate import runtime


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No launcher environment, no snapshot override, no process group."""
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "DDP_MIGRATE_SNAPSHOT"):
        monkeypatch.delenv(name, raising=False)
    if dist.is_initialized():
        dist.destroy_process_group()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def training_state(seed: int) -> dict[str, Any]:
    """A model (wrapped, as migrated code has it), optimizer, scheduler and scaler, trained a bit."""
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    wrapped = nn.DataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**seed)
    for _ in range(2):
        optimizer.zero_grad()
        wrapped(torch.randn(4, 3)).pow(2).sum().backward()
        optimizer.step()
        scheduler.step()
    return {"model": wrapped, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}


def test_without_a_snapshot_resume_starts_where_the_script_starts(tmp_path: Path) -> None:
    state = training_state(0)
    before = {k: v.clone() for k, v in state["model"].module.state_dict().items()}
    snapshot = runtime.Snapshot(tmp_path / "snapshot.pt", **state)
    assert not snapshot.exists()
    assert snapshot.resume() == 0 and snapshot.step == 0
    assert snapshot.resume(3) == 3 and (snapshot.epoch, snapshot.step) == (3, 0)
    assert all(torch.equal(before[k], v) for k, v in state["model"].module.state_dict().items())
    assert not snapshot.done(3, 0)


def test_resume_restores_every_object_and_the_position(tmp_path: Path) -> None:
    saved = training_state(1)
    runtime.Snapshot(tmp_path / "snapshot.pt", **saved).save(4, step=7)
    raw = torch.load(tmp_path / "snapshot.pt", weights_only=True)
    assert sorted(raw["states"]["model"]) == ["bias", "weight"]  # unwrapped: no "module." keys
    assert (raw["epoch"], raw["step"]) == (4, 7)
    assert "world_size" not in str(raw)  # nothing depends on the world size

    fresh = training_state(2)
    snapshot = runtime.Snapshot(tmp_path / "snapshot.pt", **fresh)
    assert snapshot.resume() == 4 and snapshot.step == 7
    for key, value in saved["model"].module.state_dict().items():
        assert torch.equal(fresh["model"].module.state_dict()[key], value)
    assert str(fresh["optimizer"].state_dict()) == str(saved["optimizer"].state_dict())
    assert fresh["scheduler"].state_dict() == saved["scheduler"].state_dict()
    assert fresh["scaler"].get_scale() == saved["scaler"].get_scale() == 2.0
    # Steps before (4, 7) were trained before the snapshot; the rest are still to do.
    assert snapshot.done(3, 99) and snapshot.done(4, 6)
    assert not snapshot.done(4, 7) and not snapshot.done(5, 0)


def test_resume_maps_onto_this_process_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = training_state(0)
    runtime.Snapshot(tmp_path / "s.pt", **state).save(1)
    locations: list[Any] = []
    real_load = torch.load

    def spy(*args: Any, **kwargs: Any) -> Any:
        locations.append(kwargs.get("map_location"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    runtime.Snapshot(tmp_path / "s.pt", **state).resume()
    assert locations == [runtime.device()]


def test_none_objects_are_left_out_and_others_must_be_stateful(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    snapshot = runtime.Snapshot(tmp_path / "s.pt", model=model, scaler=None)
    assert list(snapshot.objects) == ["model"]
    with pytest.raises(TypeError, match="epochs=int"):
        runtime.Snapshot(tmp_path / "s.pt", model=model, epochs=3)  # type: ignore[arg-type]


def test_a_snapshot_of_other_objects_is_a_clear_error(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    runtime.Snapshot(tmp_path / "s.pt", model=model).save(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="delete the file"):
        runtime.Snapshot(tmp_path / "s.pt", model=model, optimizer=optimizer).resume()
    torch.save({"model": model.state_dict()}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a snapshot"):
        runtime.Snapshot(tmp_path / "other.pt", model=model).resume()


def test_save_is_atomic_and_keeps_the_previous_snapshot_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = nn.Linear(2, 2)
    snapshot = runtime.Snapshot(tmp_path / "s.pt", model=model)
    snapshot.save(1)
    replaced: list[tuple[str, str]] = []
    real_replace = __import__("os").replace

    def spy_replace(source: str, target: str) -> None:
        replaced.append((str(source), str(target)))
        real_replace(source, target)

    monkeypatch.setattr("os.replace", spy_replace)
    snapshot.save(2)
    assert len(replaced) == 1 and replaced[0][1].endswith("s.pt")
    assert Path(replaced[0][0]).parent == tmp_path  # the temporary file sits beside it

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        snapshot.save(3)
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt"]  # no temporary file left behind
    assert runtime.Snapshot(tmp_path / "s.pt", model=model).resume() == 2


def test_only_rank_zero_writes_and_no_collective_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: pytest.fail("a collective ran"))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    snapshot = runtime.Snapshot(tmp_path / "s.pt", model=nn.Linear(2, 2))
    snapshot.save(1)
    assert list(tmp_path.iterdir()) == [] and snapshot.epoch == 1
    monkeypatch.setenv("RANK", "0")
    snapshot.save(2, step=3)
    assert runtime.Snapshot(tmp_path / "s.pt", model=nn.Linear(2, 2)).resume() == 2


def test_the_environment_variable_overrides_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDP_MIGRATE_SNAPSHOT", str(tmp_path / "elsewhere" / "s.pt"))
    runtime.Snapshot("snapshot.pt", model=nn.Linear(2, 2)).save(5)
    assert (tmp_path / "elsewhere" / "s.pt").is_file()
    assert not Path("snapshot.pt").exists()
