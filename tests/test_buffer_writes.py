"""Buffers a model writes from its batch in ``forward()`` (DDP046).

A memory bank or a queue of keys (MoCo, instance discrimination) is a buffer the model writes from each
batch. Under DDP every process writes only its shard, and ``broadcast_buffers`` copies rank 0's buffers over
the others' at the next forward: a trial's memory bank had 27 of its 32 rows updated after two epochs under
torchrun, against all 32 in the original, and the report said nothing needed a human. Such a write is left
to a human, unless the values are gathered from every process first; running statistics are not reported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from migrated import migrate_script

MEMORY_BANK = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Indexed(Dataset):
    def __init__(self, n):
        self.x = torch.randn(n, 8)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], i


class MemoryNet(nn.Module):
    def __init__(self, n, dim=4):
        super().__init__()
        self.enc = nn.Linear(8, dim)
        self.register_buffer("memory", torch.zeros(n, dim))
        self.register_buffer("updates", torch.zeros(n))
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x, idx):
        z = F.normalize(self.enc(x), dim=1)
        logits = z @ self.memory.clone().t()
        with torch.no_grad():
            self.memory[idx] = z.detach()
            self.updates[idx] += 1
            self.steps += 1
        return logits


def main():
    ds = Indexed(32)
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    model = MemoryNet(len(ds))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, idx in loader:
            loss = model(x, idx).logsumexp(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("rows updated:", int((model.updates > 0).sum()))


if __name__ == "__main__":
    main()
'''

QUEUE_MODEL = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class MoCo(nn.Module):
    def __init__(self, dim=4, K=32, m=0.99):
        super().__init__()
        self.K, self.m = K, m
        self.encoder_q = nn.Linear(8, dim)
        self.encoder_k = nn.Linear(8, dim)
        self.register_buffer("queue", F.normalize(torch.randn(dim, K), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))
        self.register_buffer("center", torch.zeros(dim))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for q, k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            k.data = k.data * self.m + q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        keys = GATHER(keys)
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        self.queue[:, ptr:ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K
        self.queue_ptr[0] = ptr

    def forward(self, im_q, im_k):
        q = F.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = F.normalize(self.encoder_k(im_k), dim=1)
        self.center = self.center * 0.9 + k.mean(0) * 0.1
        l_pos = (q * k).sum(1, keepdim=True)
        l_neg = q @ self.queue.clone().detach()
        self._dequeue_and_enqueue(k)
        return torch.cat([l_pos, l_neg], dim=1)
'''

GATHER = '''

@torch.no_grad()
def concat_all_gather(tensor):
    parts = [torch.ones_like(tensor) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(parts, tensor, async_op=False)
    return torch.cat(parts, dim=0)
'''

QUEUE_TRAIN = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

from moco import MoCo


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 8)), batch_size=8, shuffle=True)
    model = MoCo()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for a, b in loader:
            logits = model(a, b)
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(a), dtype=torch.long))
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


def _migrate_program(folder: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (folder / name).write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "ddp_migrate", "train.py"], cwd=folder, capture_output=True, text=True, timeout=120
    )


def test_memory_bank_writes_from_the_batch_are_left_to_a_human(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, MEMORY_BANK)
    assert code == 1, report  # findings remain
    assert "DistributedDataParallel(" in text
    assert "2 item(s) need a human" in report
    reviews = [line for line in report.splitlines() if "DDP046" in line]
    assert len(reviews) == 2, report
    assert "`self.memory[idx] = z.detach()` writes buffer `memory`" in reviews[0]
    assert "`self.updates[idx] += 1` writes buffer `updates`" in reviews[1]
    # the TODO stands right above each write; the step counter (the same on every rank) is not reported
    lines = text.splitlines()
    for write in ("self.memory[idx] = z.detach()", "self.updates[idx] += 1"):
        at = next(i for i, line in enumerate(lines) if line.strip() == write)
        assert lines[at - 1].strip().startswith("# TODO(ddp-migrate): `" + write + "`")
    at = next(i for i, line in enumerate(lines) if line.strip() == "self.steps += 1")
    assert "TODO" not in lines[at - 1]


def test_queue_of_a_model_module_is_reviewed_where_it_is_written(tmp_path: Path) -> None:
    """MoCo's queue, written by a method ``forward()`` calls, in another module of the program: the queue's
    write is reviewed; its pointer (a function of the batch's size) and a running mean are not."""
    model = QUEUE_MODEL.replace("keys = GATHER(keys)\n        ", "")
    done = _migrate_program(tmp_path, {"moco.py": model, "train.py": QUEUE_TRAIN})
    assert done.returncode == 1, done.stdout + done.stderr
    report = done.stdout + done.stderr
    reviews = [line for line in report.splitlines() if "DDP046" in line]
    assert len(reviews) == 1, report
    assert "moco.py" in reviews[0] and "`self.queue[:, ptr:ptr + batch_size] = keys.T` writes buffer `queue`" in reviews[0]
    assert "DistributedDataParallel(" in (tmp_path / "train.py").read_text()
    migrated_model = (tmp_path / "moco.py").read_text()
    assert migrated_model.count("TODO(ddp-migrate)") == 1
    lines = migrated_model.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "self.queue[:, ptr:ptr + batch_size] = keys.T")
    assert lines[at - 1].strip().startswith("# TODO(ddp-migrate):")


def test_queue_gathered_across_processes_is_not_reviewed(tmp_path: Path) -> None:
    model = QUEUE_MODEL.replace("GATHER(keys)", "concat_all_gather(keys)") + GATHER
    done = _migrate_program(tmp_path, {"moco.py": model, "train.py": QUEUE_TRAIN})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DDP046" not in done.stdout + done.stderr
    assert "DistributedDataParallel(" in (tmp_path / "train.py").read_text()
    assert "TODO(ddp-migrate)" not in (tmp_path / "moco.py").read_text()


def _lint(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddp_migrate", "lint", "--select", "DDP046", str(script)], capture_output=True, text=True, timeout=60
    )


def test_lint_reports_the_writes_of_a_wrapped_model_only(tmp_path: Path) -> None:
    """Without a DDP wrap the buffer is the one process's own: nothing to say before the migration. With
    one, lint reports each write from the batch, at its line."""
    script = tmp_path / "train.py"
    script.write_text(MEMORY_BANK)
    done = _lint(script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DDP046" not in done.stdout + done.stderr
    script.write_text(MEMORY_BANK.replace("model = MemoryNet(len(ds))", "model = nn.parallel.DistributedDataParallel(MemoryNet(len(ds)))"))
    done = _lint(script)
    assert done.returncode == 1, done.stdout + done.stderr
    found = [line.split(": DDP046")[0].split(":", 1)[1] for line in done.stdout.splitlines() if ": DDP046 " in line]
    lines = MEMORY_BANK.splitlines()
    expected = [f"{lines.index(' ' * 12 + write) + 1}:13" for write in ("self.memory[idx] = z.detach()", "self.updates[idx] += 1")]
    assert found == expected, done.stdout


def test_queue_rebuilt_by_concatenation_is_reported_and_a_running_mean_is_not(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        '''
import torch
import torch.nn as nn


class Bank(nn.Module):
    def __init__(self, k=16):
        super().__init__()
        self.k = k
        self.enc = nn.Linear(8, 4)
        self.register_buffer("queue", torch.zeros(0, 4))
        self.register_buffer("center", torch.zeros(4))

    def forward(self, x):
        z = self.enc(x)
        feats = z.detach()
        self.queue = torch.cat([feats, self.queue])[: self.k]
        self.center = 0.9 * self.center + 0.1 * feats.mean(0)
        return z


model = nn.parallel.DistributedDataParallel(Bank())
model(torch.randn(4, 8)).sum().backward()
'''
    )
    done = _lint(script)
    assert done.returncode == 1, done.stdout + done.stderr
    found = [line for line in done.stdout.splitlines() if ": DDP046 " in line]
    assert len(found) == 1 and ":17:9: DDP046 `self.queue = torch.cat([feats, self.queue])[: self.k]` writes buffer `queue`" in found[0], done.stdout


def test_running_statistics_pointers_settings_and_deep_gathers_are_not_reported(tmp_path: Path) -> None:
    """What a review of the rule found reported on correct code: a running mean written through a
    subscript, a pointer advanced by a helper from the batch's size, a step number stored as it is, and a
    queue gathered two calls deep."""
    script = tmp_path / "train.py"
    script.write_text(
        '''
import torch
import torch.distributed as dist
import torch.nn as nn


def _gather_list(t):
    parts = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t)
    return parts


def concat_all_gather(t):
    return torch.cat(_gather_list(t))


class Stats(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("running_mean", torch.zeros(4))
        self.register_buffer("steps", torch.zeros(1))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    def _advance(self, n):
        self.queue_ptr[0] = (self.queue_ptr[0] + n) % 64

    def forward(self, x, step):
        self.running_mean[:] = 0.9 * self.running_mean + 0.1 * x.detach().mean(0)
        self.steps[0] = step
        self._advance(x.shape[0])
        return self.lin(x - self.running_mean)


class Queue(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("queue", torch.zeros(64, 4))

    def forward(self, x):
        keys = concat_all_gather(self.lin(x).detach())
        self.queue[: keys.shape[0]] = keys
        return self.lin(x)


model = nn.parallel.DistributedDataParallel(Stats())
queue = nn.parallel.DistributedDataParallel(Queue())
(model(torch.randn(8, 4), 3).sum() + queue(torch.randn(8, 4)).sum()).backward()
'''
    )
    done = _lint(script)
    assert "DDP046" not in done.stdout, done.stdout
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_queue_written_from_a_helper_s_argument_is_reported(tmp_path: Path) -> None:
    """``self._enqueue(q.detach())`` with ``self.queue[p:p + n] = keys`` inside: the argument holds the batch
    (a review found it silent once a forward's own arguments were taken for settings)."""
    script = tmp_path / "train.py"
    script.write_text(
        '''
import torch
import torch.nn as nn


class Queue(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("queue", torch.zeros(64, 4))
        self.register_buffer("ptr", torch.zeros(1, dtype=torch.long))

    def _enqueue(self, keys):
        p, n = int(self.ptr), keys.shape[0]
        self.queue[p:p + n] = keys
        self.ptr[0] = (p + n) % 64

    def forward(self, x):
        q = self.lin(x)
        self._enqueue(q.detach())
        return q


model = nn.parallel.DistributedDataParallel(Queue())
model(torch.randn(8, 4)).sum().backward()
'''
    )
    done = _lint(script)
    found = [line for line in done.stdout.splitlines() if ": DDP046 " in line]
    assert len(found) == 1 and "`self.queue[p:p + n] = keys` writes buffer `queue`" in found[0], done.stdout
