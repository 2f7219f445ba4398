"""DDP002 when the wrapped model is built inside the wrap (``nn.DataParallel(Net())``): there is no name to
move before the wrap. The migration used to write ``Net() = Net().to(device)``, which the compile check
refused, so the whole file failed to migrate (found by the review of the speed change)."""

from __future__ import annotations

import libcst as cst

from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.base import Options
from ddp_migrate.codemods.wrap_before_device import WrapBeforeDevice
from ddp_migrate.engine import process
from ddp_migrate.registry import all_rules

HEAD = "import torch\nimport torch.nn as nn\n\ndevice = torch.device('cpu')\n"
TRAIN = "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nloss = model(torch.randn(2, 4)).sum()\nloss.backward()\nopt.step()\n"


def _migrate(body: str):
    result = process("train.py", (HEAD + body + TRAIN).encode(), all_rules(), Options(review_todos=True), fix=True)
    assert result.error is None, result.error
    assert result.output is not None
    compile(result.output, "train.py", "exec")
    return result.output.decode()


def test_a_later_move_statement_goes_into_the_wrap() -> None:
    for move, moved in (("model = model.to(device)\n", "nn.Linear(4, 2).to(device)"), ("model.cuda()\n", "nn.Linear(4, 2).to(runtime.device())")):
        out = _migrate("model = nn.DataParallel(nn.Linear(4, 2))\n" + move)
        assert f"model = DistributedDataParallel(\n    {moved}, device_ids=runtime.device_ids()\n)\n" in out, out
        assert out.count("nn.Linear(4, 2)") == 1  # built once, moved, then wrapped
        assert move not in out  # the move after the wrap is gone


def test_a_conditional_move_of_a_built_model_is_left_to_a_human() -> None:
    source = HEAD + "model = nn.DataParallel(nn.Linear(4, 2))\nif torch.cuda.is_available():\n    model.cuda()\n" + TRAIN
    analysis = ScriptAnalysis(cst.parse_module(source))
    [finding] = WrapBeforeDevice().find(analysis)
    assert not finding.fixable
    assert WrapBeforeDevice().fix(analysis, Options()) is None
    out = _migrate("model = nn.DataParallel(nn.Linear(4, 2))\nif torch.cuda.is_available():\n    model.cuda()\n")
    assert "# TODO(ddp-migrate): model wrapped before it is moved to its device under a condition" in out
