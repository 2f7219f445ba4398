"""Writes that reach no shared file (a trial on DETR and timm): ``open(os.devnull, "w")`` to silence a library's
prints, ``torch.save``/``img.save`` into ``with io.BytesIO() as out:``, ``yaml.safe_dump(cfg)`` with no stream (it
returns the text). DDP012/DDP007 said every rank wrote a file, and a fix would have guarded them to rank 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import lint_findings

PROGRAM = """
import contextlib
import io
import os

import torch
import torch.distributed as dist
import yaml


def summarize(results):
    WRITE
    return results


def main():
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(2):
        loss = model(torch.randn(8, 4, generator=g)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    summarize([1.0, 2.0])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

NO_FILE = {
    "devnull": 'with open(os.devnull, "w") as devnull:\n        with contextlib.redirect_stdout(devnull):\n            print(sum(results))',
    "bytes-io": "with io.BytesIO() as out:\n        torch.save(results, out)\n        blob = out.getvalue()",
    "yaml-text": "text = yaml.safe_dump({'lr': 0.1}, default_flow_style=False)",
}


@pytest.mark.parametrize("write", NO_FILE.values(), ids=NO_FILE.keys())
def test_a_write_that_reaches_no_file_is_not_reported(tmp_path: Path, write: str) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("WRITE", write), "DDP007,DDP012")
    assert not any("DDP007" in f or "DDP012" in f for f in findings), findings


@pytest.mark.parametrize(
    "write",
    ['with open("summary.txt", "w") as f:\n        f.write(str(results))', 'with open("cfg.yaml", "w") as f:\n        yaml.safe_dump({"lr": 0.1}, f)'],
    ids=["a-file", "yaml-to-a-file"],
)
def test_a_write_to_a_file_is_still_reported(tmp_path: Path, write: str) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("WRITE", write), "DDP012")
    assert any("DDP012" in f for f in findings), findings
