"""DDP048 set-order-data."""

from __future__ import annotations

from typing import Iterator

from . import names
from .analysis import ScriptAnalysis
from .analysis.randomness import training_set_orders
from .base import Example, Match, Phase, Rule, Valid
from .edits import code_of


class SetOrderData(Rule):
    """Sort a set before the training data takes its order.

    What it finds: a training data set built from a set's items in the set's own order: a vocabulary
    ``itos = list(set(words))`` (or ``list({w for w in words})``) the samples are encoded with, a corpus de-duplicated with
    ``list(set(lines))``, ``enumerate(set(labels))`` for class ids.

    Why it is a problem: a set of strings is ordered by the strings' hashes, and Python seeds those anew in
    every process (``PYTHONHASHSEED``). One process never shows it; under torchrun every rank builds another
    vocabulary (the same token gets other ids on each rank: a trial's perplexity 29.8 against 20.2) or
    shards a differently ordered list (147 of 198 sentences trained in an epoch, 51 twice). Rank 0's saved
    vocabulary matches what rank 0 trained on only.

    What a human must do: sort the set (``sorted(set(words))``) so that every process builds the same list.
    """

    code = "DDP048"
    name = "set-order-data"
    phase = Phase.OUTPUT
    triggers = ("set(", "{")  # (``{w for w in words}``, a set comprehension, spells no ``set``)
    requires = ("DataLoader",)
    needs_names = (names.DATA_LOADER,)
    manual_fix = "sort the set: sorted(set(...))"
    examples = (
        Example(
            before="""\
from torch.utils.data import DataLoader

words = set(w for line in lines for w in line.split())
itos = list(words)
stoi = {w: i for i, w in enumerate(itos)}
loader = DataLoader(Encoded(lines, stoi), batch_size=32, shuffle=True)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
        ),
        Valid(
            """\
from torch.utils.data import DataLoader

itos = sorted(set(w for line in lines for w in line.split()))
stoi = {w: i for i, w in enumerate(itos)}
loader = DataLoader(Encoded(lines, stoi), batch_size=32, shuffle=True)
for x, y in loader:
    loss_fn(model(x), y).backward()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call in training_set_orders(analysis):
            yield Match(
                call,
                f"the training data is built from {code_of(call).strip()}, a set's items in the set's order, which "
                "differs between processes (string hashes are seeded in each one): every rank builds another "
                "vocabulary or list and shards it differently; sort it (sorted(set(...)))",
                fixable=False,
            )
