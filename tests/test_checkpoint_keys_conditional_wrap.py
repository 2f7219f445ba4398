"""DDP016 where the program wraps its model on every path, in two branches (the ImageNet example's shape:
``if torch.cuda.is_available(): model = DDP(model, device_ids=[gpu]) else: model = DDP(model)``).

A trial's program of this shape saved ``model.state_dict()`` (``module.`` keys) for an export script that strips
the prefix. The migration read the wrap as conditional, so DDP008 saved ``runtime.unwrap(model).state_dict()``:
plain keys, and the unchanged export script failed (``Unexpected key(s) in state_dict``), 0 items.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

TRAIN = '''
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main():
    dist.init_process_group("gloo")
    model = nn.Linear(4, 2)
    WRAP
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    if dist.get_rank() == 0:
        torch.save({"epoch": 1, "state_dict": model.state_dict()}, "checkpoint.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

EVERY_PATH = {
    "if-else": "if torch.cuda.is_available():\n        model.cuda()\n        model = DistributedDataParallel(model, device_ids=[0])\n"
    "    else:\n        model = DistributedDataParallel(model)",
    "if-elif-else": "if torch.cuda.device_count() > 1:\n        model = DistributedDataParallel(model.cuda(), device_ids=[0])\n"
    "    elif torch.cuda.is_available():\n        model = DistributedDataParallel(model.cuda())\n    else:\n        model = DistributedDataParallel(model)",
    "conditional-expression": "model = DistributedDataParallel(model, device_ids=[0]) if torch.cuda.is_available() else DistributedDataParallel(model)",
}


@pytest.mark.parametrize("name", sorted(EVERY_PATH))
def test_a_wrap_on_every_path_keeps_the_checkpoints_module_keys(tmp_path: Path, name: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, TRAIN.replace("WRAP", EVERY_PATH[name]))
    assert 'runtime.unwrap(model).state_dict(prefix="module.")' in migrated, report


def test_a_wrap_on_some_paths_only_saves_the_models_own_keys(tmp_path: Path) -> None:
    """``if cuda: DDP(...) elif ...: DDP(...)`` without an ``else``: a CPU run saves the plain model."""
    wrap = "if torch.cuda.device_count() > 1:\n        model = DistributedDataParallel(model.cuda(), device_ids=[0])\n    elif torch.cuda.is_available():\n        model = DistributedDataParallel(model.cuda())"
    migrated, report, _ = migrate_script(tmp_path, TRAIN.replace("WRAP", wrap))
    assert 'state_dict(prefix="module.")' not in migrated, report
