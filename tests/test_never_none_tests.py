"""``if evaluator is not None: evaluator.synchronize()`` where ``evaluator = CocoEvaluator(...)`` is built on every
path (DETR's ``evaluate``, a trial): the test has one answer on every rank, yet DDP033 (an error) said the
all_gather under it might run on some ranks only. A name that only ever holds an object the program builds (or a
value written out) is never ``None``; one that is ``None`` off rank 0 is still reported."""

from __future__ import annotations

from pathlib import Path

from migrated import lint_findings

PROGRAM = """
import torch
import torch.distributed as dist


def all_gather(data):
    out = [torch.zeros_like(data) for _ in range(dist.get_world_size())]
    dist.all_gather(out, data)
    return out


class Evaluator:
    def __init__(self):
        self.preds = []

    def update(self, p):
        self.preds.append(p)

    def synchronize(self):
        return all_gather(torch.cat(self.preds))


@torch.no_grad()
def evaluate(model, batches):
    evaluator = BUILT
    for x in batches:
        if evaluator is not None:
            evaluator.update(model(x))
    if evaluator is not None:
        evaluator.synchronize()


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
    evaluate(model, [torch.randn(8, 4, generator=g)])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_a_collective_behind_a_test_of_an_object_always_built_is_every_ranks(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("BUILT", "Evaluator()"), "DDP033")
    assert not any("DDP033" in f for f in findings), findings


def test_a_collective_behind_a_test_of_an_object_that_may_be_none_is_reported(tmp_path: Path) -> None:
    source = PROGRAM.replace("BUILT", "Evaluator() if dist.get_rank() == 0 else None")
    findings = lint_findings(tmp_path, source, "DDP033")
    assert any("DDP033 dist.all_gather() is a collective" in f for f in findings), findings


def test_a_collective_behind_a_test_of_a_global_set_on_rank_0_is_reported(tmp_path: Path) -> None:
    # (a review: ``evaluator = None`` at the top, ``global evaluator`` and a rank-0 assignment in main())
    source = PROGRAM.replace("    evaluator = BUILT\n", "    global evaluator\n    if dist.get_rank() == 0:\n        evaluator = Evaluator()\n")
    source = source.replace("@torch.no_grad()", "evaluator = None\n\n\n@torch.no_grad()")
    findings = lint_findings(tmp_path, source, "DDP033")
    assert any("DDP033" in f for f in findings), findings


def test_a_collective_in_another_module_behind_such_a_test_is_every_ranks(tmp_path: Path) -> None:
    # (DETR: the all_gather sits in util/misc.py, the evaluator class in datasets/coco_eval.py, the ``coco_evaluator is
    # not None`` test in engine.py: the test was read with the collective's module's analysis)
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    head, _, rest = PROGRAM.replace("BUILT", "Evaluator()").partition("class Evaluator:")
    evaluator, _, main = ("class Evaluator:" + rest).partition("@torch.no_grad()")
    imports = "import torch\nimport torch.distributed as dist\n"
    (tmp_path / "comm.py").write_text(head)
    (tmp_path / "coco_eval.py").write_text(imports + "from comm import all_gather\n\n\n" + evaluator)
    (tmp_path / "engine.py").write_text(imports + "from coco_eval import Evaluator\n\n\n@torch.no_grad()" + main.split("def main():")[0])
    (tmp_path / "train.py").write_text(imports + "from engine import evaluate\n\n\ndef main():" + main.split("def main():")[1])
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP033", str(tmp_path / "train.py")]).output
    assert "DDP033" not in output and "Found 0 problem" in output, output
