"""Samples of ``torch.distributions`` objects are draws from torch's process-wide state.

An actor-critic program migrated with a DDP040 review (its episodes come from no DataLoader); its user followed
the review and seeded each rank from the rank (``torch.manual_seed(seed + runtime.rank())``). The actions it takes
(``Categorical(probs).sample()``), the rewards and the running reward then differ between ranks, and the
``runtime.save`` the migration had written under ``if running_reward > best:`` waited at its barrier for ranks
that had decided otherwise: the job hung, and lint said nothing, because only ``torch.multinomial`` and its kin
counted as draws.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import torch
import torch.nn as nn
from torch.distributions import Categorical, Normal
from torch.nn.parallel import DistributedDataParallel

from ddp_migrate import runtime

runtime.setup(device="cpu")
torch.manual_seed(SEED)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 2)

    def forward(self, x):
        return torch.softmax(self.body(x), dim=-1)


policy = DistributedDataParallel(Policy())
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)


def act(state):
    DRAW
    return action, log_prob


best = -1e9
running = 0.0
for episode in range(200):
    state = torch.zeros(4)
    log_probs, rewards = [], []
    for t in range(10):
        action, log_prob = act(state)
        log_probs.append(log_prob)
        rewards.append(1.0 if action.item() == 1 else 0.0)
    episode_reward = sum(rewards)
    loss = -(torch.stack(log_probs).sum() * episode_reward)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running = 0.05 * episode_reward + 0.95 * running
    if running > best:
        best = running
        runtime.save(policy.module.state_dict(), "best.pt")
    if running > 9.5:
        break
runtime.cleanup()
"""

CATEGORICAL = """m = Categorical(policy(state))
    action = m.sample()
    log_prob = m.log_prob(action)"""
NORMAL = """mean = policy(state)[0]
    action = Normal(mean, 1.0).rsample() > 0
    log_prob = mean"""


def _lint(tmp_path: Path, seed: str, draw: str) -> str:
    script = tmp_path / "rl.py"
    script.write_text(PROGRAM.replace("SEED", seed).replace("DRAW", draw))
    result = CliRunner().invoke(cli, ["lint", "-q", str(script)])
    assert result.exit_code in (0, 1), result.output
    return result.output


@pytest.mark.parametrize("draw", [CATEGORICAL, NORMAL], ids=["categorical-sample", "normal-rsample"])
def test_samples_seeded_from_the_rank_are_each_ranks_own(tmp_path: Path, draw: str) -> None:
    output = _lint(tmp_path, "0 + runtime.rank()", draw)
    assert "DDP041 `running > 9.5` decides on running" in output
    saves = [line for line in output.splitlines() if "DDP041 `running > best`" in line]
    assert len(saves) == 1, output
    assert "runtime.save, which every rank must reach (it ends at a barrier)" in saves[0]
    assert "the job hangs" in saves[0]


@pytest.mark.parametrize("draw", [CATEGORICAL, NORMAL], ids=["categorical-sample", "normal-rsample"])
def test_samples_seeded_alike_are_the_same_on_every_rank(tmp_path: Path, draw: str) -> None:
    assert "DDP041" not in _lint(tmp_path, "0", draw)


def test_a_sample_method_of_the_programs_own_class_is_no_torch_draw(tmp_path: Path) -> None:
    own = """class Coin:
        def sample(self):
            return torch.tensor(1)

    action = Coin().sample()
    log_prob = policy(state)[0]"""
    assert "DDP041" not in _lint(tmp_path, "0 + runtime.rank()", own)
