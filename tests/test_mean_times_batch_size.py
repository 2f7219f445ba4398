"""A loss that is a mean times this process's batch size (YOLOv5's ``ComputeLoss`` returns ``(lbox + lobj + lcls) *
bs``): a sum over the batch, which DDP's average of gradients makes N times smaller. A trial's migrated YOLO-style
program trained at half the learning rate on 2 processes with nothing in the report; DDP039 scales it by the world
size now, as it does ``reduction="sum"``, and the migrated run computes the original's weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script, saved_states

INLINE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=16, shuffle=False)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for x, y in loader:
            bs = x.shape[0]
            loss = F.mse_loss(model(x), y) * bs
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
"""

RETURNED = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class ComputeLoss:
    def __init__(self, model):
        self.model = model

    def __call__(self, p, targets):
        bs = p.shape[0]
        lbox = F.mse_loss(p, targets)
        lcls = F.l1_loss(p, targets)
        return (lbox + lcls) * bs, torch.stack((lbox, lcls)).detach()


def main():
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=16, shuffle=False)
    model = nn.Linear(4, 1)
    compute_loss = ComputeLoss(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for x, y in loader:
            loss, loss_items = compute_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("source", [INLINE, RETURNED], ids=["inline", "returned-in-a-tuple"])
def test_a_mean_times_the_batch_size_is_scaled_by_the_world_size(tmp_path: Path, source: str) -> None:
    text, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "(loss * runtime.world_size()).backward()" in text, text


def test_a_mean_alone_is_not_scaled(tmp_path: Path) -> None:
    text, report, _ = migrate_script(tmp_path, INLINE.replace(" * bs\n", "\n"))
    assert "world_size" not in text and "DDP039" not in report, report


@pytest.mark.distributed
@pytest.mark.parametrize("source", [INLINE, RETURNED], ids=["inline", "returned-in-a-tuple"])
def test_the_migrated_program_trains_the_original_weights(tmp_path: Path, source: str) -> None:
    torch = pytest.importorskip("torch")
    original, migrated = saved_states(tmp_path, source)
    for state in migrated:
        for key, value in original.items():
            assert torch.allclose(value, state[key], atol=1e-6), (key, value, state[key])


@pytest.mark.parametrize(
    "loss",
    [
        "F.mse_loss(model(x).reshape(x.shape[0] * 1, 1), y)",  # a batch count inside the loss's arguments (a review)
        "F.mse_loss(model(x), y) * y.shape[1]",  # another axis than the samples'
    ],
    ids=["count-inside-the-call", "other-axis"],
)
def test_a_mean_with_a_count_elsewhere_is_not_scaled(tmp_path: Path, loss: str) -> None:
    text, report, _ = migrate_script(tmp_path, INLINE.replace("F.mse_loss(model(x), y) * bs", loss))
    assert "world_size" not in text and "DDP039" not in report, report


def test_a_summed_loss_over_an_unsharded_loader_is_not_scaled(tmp_path: Path) -> None:
    # (a trial's VAE: its loader was left to a human, yet the sum was scaled by the world size, making every
    # gradient N times the original's until the review was done)
    source = INLINE.replace(
        "loader = DataLoader(ds, batch_size=16, shuffle=False)",
        "loader = DataLoader(ds, batch_size=16, sampler=torch.utils.data.WeightedRandomSampler(torch.ones(64), 64))",
    ).replace("F.mse_loss(model(x), y) * bs", "F.mse_loss(model(x), y, reduction='sum')")
    text, report, _ = migrate_script(tmp_path, source)
    assert "* runtime.world_size()).backward()" not in text, text
    assert "once each process trains on its share of the data" in report, report


def test_a_summed_loss_over_batches_cut_by_hand_is_not_scaled(tmp_path: Path) -> None:
    # (a review: no loader, batches sliced from tensors in ``for i in range(...)``: every process trains on the same
    # data until DDP040's review is done, and the scale doubled its gradients meanwhile)
    source = (
        "import torch\nimport torch.nn as nn\n\ntorch.manual_seed(0)\nX, Y = torch.randn(64, 4), torch.randn(64, 1)\n"
        "model = nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\nfor epoch in range(2):\n"
        "    for i in range(0, 64, 16):\n        x, y = X[i : i + 16], Y[i : i + 16]\n        opt.zero_grad()\n"
        "        loss = nn.functional.mse_loss(model(x), y, reduction='sum')\n        loss.backward()\n        opt.step()\n"
    )
    text, report, _ = migrate_script(tmp_path, source)
    assert "* runtime.world_size()).backward()" not in text, text
    assert "once each process trains on its share of the data (its training data is not sharded yet)" in report, report
