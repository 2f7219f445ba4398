"""Training data built from a random pick or order that each process draws on its own (DDP043): a list of
ids shuffled with an unseeded ``random.shuffle`` and cut into a training and a validation part, a sample
of records, an ``np.random.default_rng()`` permutation. One process never shows it; under torchrun every
rank built another training set and the ``DistributedSampler``s sharded different sets (a trial: exit 0,
nothing to review). The migration now leaves a review at the draw, in whichever module of the program
it is, and stays silent where the draw is seeded alike on every rank, or only augments a sample.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from migrated import migrate_script

PROGRAM = '''
import random

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Records(Dataset):
    def __init__(self, ids):
        self.ids = ids

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        x = torch.full((4,), float(self.ids[i]))
        if random.random() < 0.5:  # an augmentation: each rank draws it for its own samples
            x = -x
        return x, torch.zeros(1)


def set_seed(seed):
    {helper}


def main():
    {seed}
    ids = list(range(100))
    {draw}
    loader = DataLoader({dataset}, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


def _draw_reviews(tmp_path: Path, draw: str, dataset: str, seed: str = "pass", helper: str = "pass") -> list[str]:
    source = PROGRAM.format(draw=draw, dataset=dataset, seed=seed, helper=helper)
    migrated, report, code = migrate_script(tmp_path, source)
    reviews = [line for line in report.splitlines() if "DDP043" in line]
    assert code == (1 if reviews else 0) or "review" in report, report
    assert migrated.count("TODO(ddp-migrate): the training data set is built from") == len(reviews), migrated
    return reviews


@pytest.mark.parametrize(
    ("draw", "dataset", "called"),
    [
        ("random.shuffle(ids)", "Records(ids[:80])", "random.shuffle()"),
        ("ids = np.random.permutation(ids)", "Records(ids[:80])", "np.random.permutation()"),
        ("held_out = random.sample(ids, 20)", "Records([i for i in ids if i not in held_out])", "random.sample()"),
        ("rng = np.random.default_rng()", "Records(rng.permutation(ids)[:80])", "rng.permutation()"),
        ("order = torch.randperm(100).tolist()", "Records([ids[i] for i in order[:80]])", "torch.randperm()"),
    ],
)
def test_training_data_cut_from_an_unseeded_draw_is_left_to_a_human(tmp_path: Path, draw: str, dataset: str, called: str) -> None:
    reviews = _draw_reviews(tmp_path, draw, dataset)
    assert len(reviews) == 1 and f"built from {called}" in reviews[0], reviews


@pytest.mark.parametrize(
    ("seed", "helper", "draw", "dataset"),
    [
        ("random.seed(0)", "pass", "random.shuffle(ids)", "Records(ids[:80])"),
        ("np.random.seed(0)", "pass", "ids = np.random.permutation(ids)", "Records(ids[:80])"),
        ("set_seed(0)", "random.seed(seed)", "random.shuffle(ids)", "Records(ids[:80])"),
        ("torch.manual_seed(0)", "pass", "order = torch.randperm(100).tolist()", "Records([ids[i] for i in order[:80]])"),
        ("pass", "pass", "rng = np.random.default_rng(0)", "Records(rng.permutation(ids)[:80])"),
        # Synthetic samples drawn on each rank are samples of one distribution: not a split.
        ("pass", "pass", "x = torch.randn(100, 4)", "TensorDataset(x, x.sum(1, keepdim=True))"),
        # A draw the training data is not built from (the augmentation in __getitem__ aside).
        ("pass", "pass", "probe = random.choice(ids)", "Records(ids)"),
    ],
)
def test_data_drawn_alike_on_every_rank_or_not_drawn_is_left_alone(tmp_path: Path, seed: str, helper: str, draw: str, dataset: str) -> None:
    assert _draw_reviews(tmp_path, draw, dataset, seed=seed, helper=helper) == []


def test_a_seeding_helper_seeds_only_the_states_it_seeds(tmp_path: Path) -> None:
    """``set_seed`` of the program seeds numpy and torch, not Python's ``random``: the shuffle still differs."""
    reviews = _draw_reviews(tmp_path, "random.shuffle(ids)", "Records(ids[:80])", seed="set_seed(0)", helper="np.random.seed(seed); torch.manual_seed(seed)")
    assert len(reviews) == 1 and "random.seed(0)" in reviews[0], reviews


SPLITS = '''
import random


def split_ids(n):
    ids = list(range(n))
    random.shuffle(ids)
    return ids[: n * 4 // 5], ids[n * 4 // 5 :]


class Shuffled:
    def __init__(self, n):
        self.ids = list(range(n))
        random.shuffle(self.ids)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return self.ids[i]
'''

ENTRY = '''
import torch
from torch import nn
from torch.utils.data import DataLoader

from splits import Shuffled, split_ids


def main():
    train_ids, val_ids = split_ids(100)
    train = DataLoader(torch.tensor(train_ids, dtype=torch.float32).unsqueeze(1), batch_size=8, shuffle=True)
    extra = DataLoader(Shuffled(40), batch_size=8)
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for epoch in range(2):
        for x in train:
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()
        for x in extra:
            optimizer.zero_grad()
            model(x.float().view(-1, 1)).pow(2).mean().backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


def test_a_draw_in_another_module_of_the_program_is_reviewed_where_it_is(tmp_path: Path) -> None:
    """The split helper's shuffle and a data set class whose ``__init__`` shuffles, in ``splits.py``; the
    loaders in ``train.py``: the reviews land in ``splits.py``, at each shuffle."""
    (tmp_path / "splits.py").write_text(SPLITS)
    (tmp_path / "train.py").write_text(ENTRY)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP043", str(tmp_path)], catch_exceptions=False)
    found = [line.split(": ")[0].rsplit("/", 1)[-1] for line in result.output.splitlines() if "DDP043" in line]
    assert found == ["splits.py:7:5", "splits.py:14:9"], result.output


SEEDED_LATER = '''
import random

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


def seed_everything(seed):
    random.seed(seed)
    torch.manual_seed(seed)


def build():
    full = TensorDataset(torch.randn(50, 4), torch.zeros(50, 1))
    ids = list(range(50))
    random.shuffle(ids)
    return random_split(full, [40, 10]), ids


def main():
    {before}
    (train_set, val_set), ids = build()
    {after}
    loader = DataLoader(train_set, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("seed", ["seed_everything(0)", "torch.manual_seed(0); random.seed(0)"])
def test_a_seed_that_runs_after_the_draw_does_not_seed_it(tmp_path: Path, seed: str) -> None:
    """A trial's split was followed by ``torch.manual_seed(0)``: every rank split on its own (33 distinct
    training ids of 40 in an epoch, 7 validation ids trained on), and the report said nothing."""
    migrated, report, _ = migrate_script(tmp_path, SEEDED_LATER.format(before="pass", after=seed))
    assert "DDP043 line 18: random_split given a seeded generator" in report, report
    assert "random_split(full, [40, 10], generator=torch.Generator().manual_seed(0))" in migrated
    assert "review" in report and "built from random.shuffle()" in report, report
    (tmp_path / "seeded").mkdir()
    migrated, report, _ = migrate_script(tmp_path / "seeded", SEEDED_LATER.format(before=seed, after="pass"))
    assert "DDP043" not in report and "generator=" not in migrated, report


@pytest.mark.parametrize(
    ("seed", "seeded"),
    [
        ("cfg = json.loads(os.environ.get('CFG', '{\"seed\": 0}')); torch.manual_seed(cfg['seed']); random.seed(cfg['seed'])", True),
        ("cfg = types.SimpleNamespace(**json.loads('{\"seed\": 0}')); seed_everything(cfg.seed)", True),
        ("seed_everything(int(time.time()))", False),
        ("args = types.SimpleNamespace(seed=None); args.seed = random.randint(0, 99); torch.manual_seed(args.seed)", False),
    ],
    ids=["config-item", "config-attribute", "clock", "setting-drawn-at-random"],
)
def test_a_seed_read_from_the_settings_seeds_alike(tmp_path: Path, seed: str, seeded: bool) -> None:
    """A trial's seed came from a YAML config (``torch.manual_seed(cfg.seed)``): the split was the same on
    every rank, yet DDP043 gave it another generator, and the migrated program trained on other samples
    than the original (former validation samples among them). A value a call makes on each process is
    still no common seed."""
    source = "import json\nimport os\nimport time\nimport types\n" + SEEDED_LATER.format(before=seed, after="pass")
    migrated, report, _ = migrate_script(tmp_path, source)
    assert ("DDP043" not in report) is seeded, report
    assert ("generator=" not in migrated) is seeded


@pytest.mark.parametrize(
    ("draw", "dataset", "reviewed"),
    [
        ("ids = list(set(ids))", "Records(ids[:80])", True),  # de-duplicated: each rank another order
        ("words = set(str(i) for i in ids)\n    ids = [int(w) for w in list(words)]", "Records(ids[:80])", True),
        ("ids = sorted(set(ids))", "Records(ids[:80])", False),
    ],
    ids=["list-of-set", "name-of-a-set", "sorted"],
)
def test_a_set_s_order_is_each_process_s_own(tmp_path: Path, draw: str, dataset: str, reviewed: bool) -> None:
    """(DDP048) A trial's vocabulary ``list(set(words))`` and de-duplicated corpus ``list(set(lines))``: a set of
    strings is ordered by their hashes, which every process seeds on its own; the ranks built other
    vocabularies (perplexity 29.8 against 20.2) and sharded differently ordered lists (147 of 198 sentences
    trained in an epoch, 51 twice), report silent."""
    source = PROGRAM.format(draw=draw, dataset=dataset, seed="pass", helper="pass")
    migrated, report, _ = migrate_script(tmp_path, source)
    reviews = [line for line in report.splitlines() if "DDP048" in line]
    assert bool(reviews) is reviewed, report
    if reviewed:
        assert "a set's items in the set's order" in reviews[0] and "sorted(set(...))" in reviews[0]
        assert migrated.count("TODO(ddp-migrate): the training data is built from") == 1


DATA_AT_IMPORT = '''
import numpy as np
import torch
from torch.utils.data import Subset, TensorDataset, random_split

X = torch.arange(400, dtype=torch.float32)[:, None]
full = TensorDataset(X, (X[:, 0] > 200).float()[:, None])
train_set, val_set = random_split(full, [300, 100])
perm = np.random.permutation(400)
extra_set = Subset(full, perm[:100].tolist())
'''

ENTRY_SEEDING = '''
{before}
import numpy as np
import torch
from torch import nn
from torch.utils.data import ConcatDataset, DataLoader

{after_import}
from data import extra_set, train_set


def main():
    {in_main}
    loader = DataLoader(ConcatDataset([train_set, extra_set]), batch_size=20, shuffle=True)
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    ("before", "after_import", "in_main", "reviewed"),
    [
        ("", "", "torch.manual_seed(0); np.random.seed(0)", True),
        ("", "torch.manual_seed(0); np.random.seed(0)", "pass", True),
        ("import numpy, torch; torch.manual_seed(0); numpy.random.seed(0)", "", "pass", False),
    ],
    ids=["seeded-in-main", "seeded-at-the-top-after-the-import", "seeded-before-the-import"],
)
def test_a_split_made_when_its_module_is_imported_runs_before_main_seeds(
    tmp_path: Path, before: str, after_import: str, in_main: str, reviewed: bool
) -> None:
    """A trial's ``data.py`` split its data set at import time, and ``main()`` seeded torch afterwards: the
    seed counted, nothing was reported, and under torchrun the ranks' training samples overlapped (58 in
    common, 242 of 300 covered; 38 of rank 0's validation samples were in rank 1's training set). A seed
    in the entry runs before an import-time draw only when it comes before the import."""
    (tmp_path / "data.py").write_text(DATA_AT_IMPORT)
    source = ENTRY_SEEDING.format(before=before, after_import=after_import, in_main=in_main)
    after_import_seed = after_import.strip()
    if after_import_seed:  # (at the top, after the imports, as scripts seed)
        source = source.replace(f"{after_import_seed}\nfrom data import extra_set, train_set", f"from data import extra_set, train_set\n{after_import_seed}")
    (tmp_path / "train.py").write_text(source)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP043", str(tmp_path)], catch_exceptions=False)
    found = sorted(line.split(": ")[0].rsplit("/", 1)[-1] for line in result.output.splitlines() if "DDP043" in line)
    assert found == (["data.py:8:22", "data.py:9:8"] if reviewed else []), result.output


@pytest.mark.parametrize(
    "entry",
    [
        ENTRY_SEEDING.format(before="", after_import="torch.manual_seed(0)\nnp.random.seed(0)", in_main="pass"),
        ENTRY_SEEDING.format(before="", after_import="", in_main="torch.manual_seed(0); np.random.seed(0)").replace(
            "from data import extra_set, train_set\n", ""
        ).replace("    loader = DataLoader(", "    from data import extra_set, train_set\n    loader = DataLoader(", 1),
    ],
    ids=["seed-after-torch-utils-data-before-data", "lazy-import-after-the-seed"],
)
def test_a_seed_that_runs_before_the_module_is_imported_seeds_its_draws(tmp_path: Path, entry: str) -> None:
    """A review found two false alarms: ``torch.utils.data`` counted as importing ``data.py``, and a lazy
    ``from data import ...`` in ``main()`` after the seed was taken for an import before it."""
    (tmp_path / "data.py").write_text(DATA_AT_IMPORT)
    (tmp_path / "train.py").write_text(entry)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP043", str(tmp_path)], catch_exceptions=False)
    assert "DDP043" not in result.output, result.output


DATA_IN_A_HELPER = '''import torch
from torch.utils.data import TensorDataset, random_split


def build_datasets(n):
    full = TensorDataset(torch.randn(n, 1), torch.randn(n, 1))
    return random_split(full, [n - 20, 20])
'''

ENTRY_CALLING_THE_HELPER = '''import torch
from torch import nn
from torch.utils.data import DataLoader

from data import build_datasets


def main(seed=0):
PROLOGUE    loader = DataLoader(train_set, batch_size=20, shuffle=True)
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
'''


_SPLIT = "    train_set, val_set = build_datasets(100)\n"
_SEED = "    torch.manual_seed(seed)\n"


@pytest.mark.parametrize(
    ("prologue", "reviewed"),
    [
        (_SEED + _SPLIT, False),
        (_SPLIT, True),
        # A review: the seed after the call seeds nothing the split drew.
        (_SPLIT + _SEED, True),
    ],
    ids=["seeded", "unseeded", "seeded-after-the-split"],
)
def test_a_split_in_a_helper_of_another_module_that_main_calls_after_seeding_is_seeded(tmp_path: Path, prologue: str, reviewed: bool) -> None:
    """A trial: ``main()`` seeded torch, then called ``build_datasets()`` of ``mylib/data.py``, which split with
    ``random_split``. The split was taken for one made when ``data.py`` is imported (the chain of callers ends at
    the entry's ``main()`` call, at its top level), DDP043 gave it a generator of its own, and the migrated program
    split differently from the original and drew other initial weights."""
    (tmp_path / "data.py").write_text(DATA_IN_A_HELPER)
    entry = ENTRY_CALLING_THE_HELPER.replace("PROLOGUE", prologue)
    (tmp_path / "train.py").write_text(entry)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP043", str(tmp_path)], catch_exceptions=False)
    assert ("data.py:7:12: DDP043" in result.output) is reviewed, result.output


def test_a_helper_split_called_at_the_top_of_a_module_the_entry_imports_runs_at_import(tmp_path: Path) -> None:
    # A review: ``config.py`` calls ``build_datasets()`` at its top level, so the split runs when the entry imports
    # ``config``, before ``main()`` seeds; the seed was checked against the imports of ``data.py`` instead.
    (tmp_path / "data.py").write_text(DATA_IN_A_HELPER)
    (tmp_path / "config.py").write_text("from data import build_datasets\n\ntrain_set, val_set = build_datasets(100)\n")
    entry = ENTRY_CALLING_THE_HELPER.replace("from data import build_datasets", "from config import train_set")
    (tmp_path / "train.py").write_text(entry.replace("PROLOGUE", _SEED))
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP043", str(tmp_path)], catch_exceptions=False)
    assert "data.py:7:12: DDP043" in result.output, result.output
