"""DDP043 unseeded-random-split."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, keyword_argument, walk
from .analysis.randomness import ALL_DRAWS, GENERATORS, REMEDIES, training_data_draws
from .analysis.ranks import seeds_alike
from .analysis.script import callee_name
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression, with_keyword

#: ``torch.utils.data.random_split`` under the names torch exports it by.
RANDOM_SPLIT = frozenset({"torch.utils.data.random_split", "torch.utils.data.dataset.random_split"})
#: ``Subset(dataset, indices)``: a split by hand.
SUBSET = names.SUBSET
#: Random orders a split by hand draws its indices from: a generator can be given to torch's.
TORCH_PERMUTATIONS = frozenset({"torch.randperm"})
#: ... and not to these, which draw from the global state of their module (``shuffle`` in place).
GLOBAL_PERMUTATIONS = frozenset(
    {"numpy.random.permutation", "numpy.random.choice", "random.sample", "random.shuffle", "numpy.random.shuffle"}
)


class UnseededRandomSplit(Rule):
    """Split a data set the same way on every process: give ``random_split`` a seeded generator.

    What it finds: ``random_split(dataset, lengths)`` without a ``generator=`` in a training program that
    does not seed torch's global random state alike on every rank (no ``torch.manual_seed(42)``, or a seed
    that flows from the rank); likewise a split by hand, ``Subset(dataset, indices[:k])`` whose indices
    come from ``torch.randperm(n)`` (fixed), or from ``np.random.permutation``, ``random.shuffle`` and the
    like (left to a human: they take no generator). And, in any module of the program, a pick or an order
    drawn from a random state the program does not seed alike on every rank (``random.shuffle(files)``
    without ``random.seed``, ``np.random.choice``, an ``np.random.default_rng()`` built without a seed) that
    a training ``DataLoader``'s data set is built from, through names, calls and a data set class's
    ``__init__`` (left to a human).

    Why it is a problem: without a generator the split draws from the global random state, which each
    process seeds on its own at start. Every rank then splits differently: the ``DistributedSampler``s shard
    different training sets, samples one rank validates on are another rank's training data, and the
    validation metrics are contaminated (a trial: 95 of rank 0's 120 validation samples were in rank 1's
    training set). One process alone never showed it.

    What the fix does: passes ``generator=torch.Generator().manual_seed(0)``, the same split on every rank
    and in every run.

    Fix safety: unsafe. The split differs from the one the original drew, and the global random state is
    no longer advanced by the split, so whatever draws from it next (the model's initial weights) differs
    too: a program seeded with ``torch.manual_seed(seed + rank)``, deterministic as one process, computes
    other numbers even as plain ``python`` (a trial). ``lint --fix`` applies it only with
    ``--unsafe-fixes``; the migration applies it.
    """

    code = "DDP043"
    name = "unseeded-random-split"
    phase = Phase.SAMPLERS
    fix_safety = FixSafety.UNSAFE
    triggers = ("random_split", "Subset", "randperm", "shuffle", "permut", "choice", "sample")
    # A split in training code, or a draw that a training DataLoader's data set is built from (in a module
    # of the program that may hold no training code: a program's words are the words of all its modules).
    requires = (*names.TRAINING_STEP_WORDS, "DataLoader")
    needs_names = (RANDOM_SPLIT | SUBSET | ALL_DRAWS | GENERATORS,)
    examples = (
        # A split by hand: the Subsets take their indices from one random order.
        Example(
            before="""\
import torch
from torch.utils.data import Subset

order = torch.randperm(len(data)).tolist()
train_set, val_set = Subset(data, order[:800]), Subset(data, order[800:])
loss.backward()
""",
            after="""\
import torch
from torch.utils.data import Subset

order = torch.randperm(len(data), generator=torch.Generator().manual_seed(0)).tolist()
train_set, val_set = Subset(data, order[:800]), Subset(data, order[800:])
loss.backward()
""",
        ),
        Example(
            before="""\
import numpy as np
from torch.utils.data import Subset

order = np.random.permutation(len(data))
train_set = Subset(data, order[:800])
loss.backward()
""",
        ),
        Example(
            before="""\
import torch
from torch.utils.data import random_split

parts = random_split(data, [0.8, 0.2])
loss.backward()
""",
            after="""\
import torch
from torch.utils.data import random_split

parts = random_split(data, [0.8, 0.2], generator=torch.Generator().manual_seed(0))
loss.backward()
""",
        ),
        # A generator of its own seeds the data, not the split (the trial's script).
        Example(
            before="""\
import torch
from torch.utils.data import TensorDataset, random_split

g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(600, 10, generator=g))
parts = random_split(data, [480, 120])
loss.backward()
""",
            after="""\
import torch
from torch.utils.data import TensorDataset, random_split

g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(600, 10, generator=g))
parts = random_split(data, [480, 120], generator=torch.Generator().manual_seed(0))
loss.backward()
""",
        ),
        # A list of files shuffled by each process on its own, cut into a training and a validation part.
        Example(
            before="""\
import random
from torch.utils.data import DataLoader

files = sorted(os.listdir("data"))
random.shuffle(files)
loader = DataLoader(Files(files[:800]), batch_size=32)
for x, y in loader:
    loss_fn(model(x), y).backward()
"""
        ),
        Valid(
            """\
import random
from torch.utils.data import DataLoader

random.seed(0)
files = sorted(os.listdir("data"))
random.shuffle(files)
loader = DataLoader(Files(files[:800]), batch_size=32)
for x, y in loader:
    loss_fn(model(x), y).backward()
"""
        ),
        Valid(
            """\
import torch
from torch.utils.data import random_split

torch.manual_seed(42)
parts = random_split(data, [0.8, 0.2])
loss.backward()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        reported: set[cst.Call] = set()
        if analysis.is_training_code:
            for match in self._split_matches(analysis):
                reported.add(match.node)  # type: ignore[arg-type]
                yield match
        for call, state in training_data_draws(analysis):
            if call not in reported:
                yield Match(
                    call,
                    f"the training data set is built from {code_of(call.func)}(), a draw from each process's own "
                    f"random state: every rank shards a different data set (samples missing, others trained on "
                    f"twice, one rank's validation samples another's training data); {REMEDIES[state]}",
                    fixable=False,
                )

    def _split_matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        """The ``random_split`` calls and the random orders of ``Subset`` splits of a program whose torch
        random state is not seeded alike on every rank."""
        splits = [call for call in analysis.calls_to(RANDOM_SPLIT) if keyword_argument(call, "generator") is None and len(call.args) < 3]
        by_hand = self._orders_of_subsets(analysis)
        if not (splits or by_hand):
            return
        for call in splits:
            if seeds_alike(analysis, before=call):
                continue
            seed = _seed_for(analysis, call)
            yield Match(
                call,
                "random_split draws from each process's own random state: every rank splits differently (one "
                "rank's validation samples are another's training data); give it a seeded generator"
                + ("" if seed is not None else ", made once before the loop around it (the original split anew at each pass)"),
                fixable=seed is not None,
            )
        for call in by_hand:
            if seeds_alike(analysis, before=call):
                continue
            if analysis.is_call_to(call, TORCH_PERMUTATIONS):
                seed = _seed_for(analysis, call)
                yield Match(
                    call,
                    "the random order this split takes its Subset indices from differs on every rank (one rank's "
                    "validation samples are another's training data); give it a seeded generator"
                    + (
                        "" if seed is not None else
                        ", seeded alike on every rank but anew at each pass of the loop around it (the original drew "
                        "another order each time: a generator made once before the loop)"
                    ),
                    fixable=seed is not None,
                )
            else:
                yield Match(
                    call,
                    f"{code_of(call.func)}() orders the indices of a Subset split from each process's own random "
                    "state: every rank splits differently; seed it alike on every rank (or use torch.randperm with "
                    "a seeded generator)",
                    fixable=False,
                )

    @staticmethod
    def _orders_of_subsets(analysis: ScriptAnalysis) -> list[cst.Call]:
        """The random orders (``torch.randperm(n)``, ``np.random.permutation``, ``random.shuffle(indices)``)
        whose indices a ``Subset(dataset, indices[:k])`` of the module takes, through the names assigned in
        the same function."""
        found: list[cst.Call] = []
        permutations = analysis.calls_to(GLOBAL_PERMUTATIONS)
        for subset in analysis.calls_to(SUBSET):
            if len(subset.args) < 2:
                continue
            function = analysis.enclosing_function(subset)
            names_used = {dotted_name(n) for n in walk(subset.args[1].value) if isinstance(n, cst.Name)}
            for name in filter(None, names_used):
                values = analysis.assigned_values(function, name)  # type: ignore[arg-type]
                shuffles = [
                    call for call in permutations
                    if call.args and dotted_name(call.args[0].value) == name and analysis.enclosing_function(call) is function
                ]
                for call in [n for value in values for n in walk(value) if isinstance(n, cst.Call)] + shuffles:
                    if call in found or keyword_argument(call, "generator") is not None:
                        continue
                    if analysis.is_call_to(call, TORCH_PERMUTATIONS | GLOBAL_PERMUTATIONS):
                        found.append(call)
        return found

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            call = match.node
            assert isinstance(call, cst.Call)
            if not match.fixable:
                continue
            torch = analysis.local_name_for("torch")
            if torch is None:
                edits.add_import("torch")
                torch = "torch"
            seed = _seed_for(analysis, call)
            edits.replace(call, with_keyword(call, "generator", expression(f"{torch}.Generator().manual_seed({seed})")))
            what = "random_split" if analysis.is_call_to(call, RANDOM_SPLIT) else code_of(call.func)
            anew = f", another at each {seed}" if seed != "0" else ""
            edits.changes.append(Change(self.code, analysis.line(call), f"{what} given a seeded generator (the same split on every rank{anew})"))
        return edits.apply(analysis.module) if edits else None


def _seed_for(analysis: ScriptAnalysis, call: cst.Call) -> str | None:
    """The seed of the generator the fix gives a draw: ``0``, or in a loop over ``range(...)`` its counter
    (``for epoch in range(n):`` draws a fresh subset each epoch, alike on every rank: a fixed seed there
    would draw the same subset every time); ``None`` in another loop (no counter to seed from)."""
    loop = analysis.nearest_loop(call)
    if loop is None:
        return "0"
    if type(loop) is cst.For and type(loop.iter) is cst.Call and callee_name(loop.iter) == "range" and type(loop.target) is cst.Name:  # type: ignore[attr-defined]
        return loop.target.value  # type: ignore[attr-defined]
    return None
