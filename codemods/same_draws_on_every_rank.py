"""DDP051 same-draws-on-every-rank."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, keyword_argument, loader_argument, walk
from .analysis.script import own_method
from .analysis.loaders import without_gradients
from .analysis.per_rank import PerRankValues, per_rank_values, training_batch_values
from .analysis.ranks import (
    DISTRIBUTION_DRAWS,
    STATE_DRAWS,
    draws_per_rank,
    generator_seeded_alike,
    is_distribution_draw,
    seeded_alike_only_when_given,
    seeds_alike,
)
from .analysis.trainable import wrapped_model_classes
from .base import Example, Match, Note, Options, Phase, Rule, Severity, Valid
from .edits import code_of

#: Draws of values from torch's random state (process-wide, or a ``generator=``): noise, time steps, masks.
VALUE_DRAWS = frozenset(
    {
        "torch.randn", "torch.rand", "torch.randint", "torch.normal", "torch.randn_like", "torch.rand_like",
        "torch.randint_like", "torch.bernoulli", "torch.multinomial", "torch.poisson", "torch.randperm",
    }
)
#: Draws from numpy's process-wide random state (``z = torch.FloatTensor(np.random.normal(0, 1, (n, nz)))``,
#: the PyTorch-GAN scripts' noise), by the position of their ``size`` argument (``None``: every positional
#: argument is a dimension, ``np.random.randn(n, nz)``).
NUMPY_SIZE_POSITIONS: dict[str, int | None] = {
    "normal": 2, "uniform": 2, "randint": 2, "binomial": 2, "beta": 2, "laplace": 2, "choice": 1, "exponential": 1,
    "poisson": 1, "standard_normal": 0, "random": 0, "random_sample": 0, "randn": None, "rand": None, "permutation": 0,
}
NUMPY_DRAWS = frozenset(f"numpy.random.{n}" for n in NUMPY_SIZE_POSITIONS)
#: Tensor factories whose shape the draws filling them keep: from their sizes (``torch.empty(x.size(0), nz)``)
#: or from their first argument (``torch.empty_like(x)``).
_SIZED_FACTORIES = frozenset({"torch.empty", "torch.zeros", "torch.ones", "torch.full"})
_LIKE_FACTORIES = frozenset({"torch.empty_like", "torch.zeros_like", "torch.ones_like", "torch.full_like"})
_FACTORIES = _SIZED_FACTORIES | _LIKE_FACTORIES
#: The draws (and factories) that may take their shape from their first argument, a tensor
#: (``torch.randn_like(x)``, ``torch.bernoulli(probs)``, ``torch.normal(mean, std)``).
_SHAPED_LIKE_FIRST = _LIKE_FACTORIES | {
    "torch.randn_like", "torch.rand_like", "torch.randint_like", "torch.bernoulli", "torch.multinomial", "torch.poisson", "torch.normal"
}
#: Tensor methods that make a tensor of the sizes they are given (``x.new_empty(x.shape).uniform_()``).
_NEW_TENSOR_METHODS = frozenset({"new_empty", "new_zeros", "new_ones", "new_full"})
#: Tensor methods that fill their tensor with draws (``torch.empty_like(x).normal_()``).
FILLING_DRAWS = frozenset({"normal_", "uniform_", "bernoulli_", "exponential_", "geometric_", "cauchy_", "log_normal_", "random_"})


class SameDrawsOnEveryRank(Rule):
    """Review noise drawn per sample of the batch from a random state every rank seeds alike.

    What it finds, in a program that trains a ``DistributedDataParallel`` model on sharded data and seeds
    torch's random state with the same value on every rank (``torch.manual_seed(0)``): a draw from that state
    in the training loop whose size follows this process's batch (``torch.randn(real.size(0), nz)``,
    ``torch.randn_like(x)``, ``torch.randint(0, T, (x.shape[0],))``, ``torch.bernoulli(probs)``,
    ``torch.empty(x.size(0), nz).normal_()``, ``Categorical(logits=out).sample()``): a GAN's noise vectors,
    a diffusion model's noise and time steps, per-sample masks; and such a draw from numpy's random state
    that every rank seeds alike (``np.random.normal(0, 1, (real.shape[0], nz))``, the noise of many GAN
    scripts). Also such a draw from a ``generator=`` that
    every rank seeds alike (``g = torch.Generator(); g.manual_seed(0)``; unseeded, a new generator starts
    from the same fixed seed everywhere). A random augmentation in a dataset's ``__getitem__`` (``x +
    torch.randn(4)``, ``np.random.uniform(...)``, also in a method ``__getitem__`` calls) under such a seed gets a
    note, not a review: every rank's k-th sample gets the same draw, but the samples differ. So does a dropout
    (``nn.Dropout(0.1)``, ``F.dropout(x, 0.1)``, ``nn.GRU(..., dropout=0.2)``): every rank's k-th sample gets the
    same mask.

    Why it is a problem: the ranks' random states start alike and draw alike, so every rank draws the same
    numbers for its share of the batch: the global batch holds N copies of the same noise, where the original
    drew a fresh value for each sample (a trial's GAN: 2 copies of 8 noise vectors per batch, weights off by
    3e-2 from the original). A draw that decides for the whole batch (``if torch.rand(1) < p:``) is right
    to be alike and is left alone.

    What a human must do: seed each rank differently once the model is built and the data split (DDP copies
    rank 0's weights at the wrap), e.g. ``torch.manual_seed(seed + runtime.rank())``, or draw from a
    ``torch.Generator`` seeded per rank.
    """

    code = "DDP051"
    name = "same-draws-on-every-rank"
    phase = Phase.OUTPUT
    severity = Severity.WARNING
    triggers = ("rand", "bernoulli", "multinomial", "poisson", "normal", "uniform_", "exponential_", "geometric_", "cauchy_", "sample", "ropout")
    #: A seed, or a generator (a new one starts from the same fixed seed in every process).
    requires = ("manual_seed", "seed", "Generator")
    needs_names = (names.DISTRIBUTED_DATA_PARALLEL,)
    manual_fix = "seed each rank differently after the wrap (torch.manual_seed(seed + runtime.rank())), or draw from a generator seeded per rank"
    examples = (
        Example(
            before="""\
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

torch.manual_seed(0)
netD = DistributedDataParallel(discriminator)
loader = DataLoader(images, batch_size=64, sampler=DistributedSampler(images))
for (real,) in loader:
    fake = netG(torch.randn(real.size(0), 100))
    loss = netD(fake).mean() - netD(real).mean()
    loss.backward()
""",
        ),
        Example(
            before="""\
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

noise_source = torch.Generator()
noise_source.manual_seed(1234)
netD = DistributedDataParallel(discriminator)
loader = DataLoader(images, batch_size=64, sampler=DistributedSampler(images))
for (real,) in loader:
    fake = netG(torch.randn(real.size(0), 100, generator=noise_source))
    loss = netD(fake).mean() - netD(real).mean()
    loss.backward()
""",
        ),
        Valid(
            """\
import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

noise_source = torch.Generator().manual_seed(1234 + runtime.rank())
netD = DistributedDataParallel(discriminator)
loader = DataLoader(images, batch_size=64, sampler=DistributedSampler(images))
for (real,) in loader:
    fake = netG(torch.randn(real.size(0), 100, generator=noise_source))
    loss = netD(fake).mean() - netD(real).mean()
    loss.backward()
"""
        ),
        Valid(
            """\
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

torch.manual_seed(0)
model = DistributedDataParallel(net)
loader = DataLoader(data, batch_size=64, sampler=DistributedSampler(data))
for x, y in loader:
    if torch.rand(1).item() < 0.5:
        x = x.flip(-1)
    loss = criterion(model(x + 0.1 * torch.randn(16, 3)), y)
    loss.backward()
"""
        ),
    )

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        workers = _loads_in_workers(analysis)
        found = [
            Note(
                self.code,
                analysis.line(call),
                f"`{getitem.name.value}()` draws its random augmentation (`{code_of(call)}`) from a random state every "
                "rank seeds alike (the loader's workers are seeded from it): each rank's k-th sample gets the same draw, "
                f"where the original drew afresh for every sample; for independent draws seed each rank differently after "
                + (
                    "the wrap with torch.manual_seed(seed + runtime.rank()): the loader's worker processes seed their "
                    "random states (numpy's too, and any worker_init_fn reading torch.initial_seed()) from torch's, so "
                    f"{seeding}(seed + runtime.rank()) alone changes nothing there"
                    if workers and seeding != "torch.manual_seed"
                    else f"the wrap ({seeding}(seed + runtime.rank()))"
                ),
            )
            for getitem, call, seeding in _augmentations_drawn_alike(analysis)
        ]
        dropout = _dropout_drawn_alike(analysis)
        if dropout is not None:
            found.append(
                Note(
                    self.code,
                    analysis.line(dropout),
                    f"`{code_of(dropout)}` draws its masks from torch's random state, which every rank seeds alike: each "
                    "rank's k-th sample gets the same mask, where the original drew one for every sample of the global "
                    "batch; for independent masks seed each rank differently after the wrap "
                    "(torch.manual_seed(seed + runtime.rank()))",
                )
            )
        return found

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.program_wrap_calls or not analysis.program_backward_calls:
            return
        draws = _draws(analysis)
        numpy_draws = list(analysis.calls_to(NUMPY_DRAWS))
        if not draws and not numpy_draws:
            return
        if draws_per_rank(analysis):
            return
        process_wide = [call for call in draws if keyword_argument(call, "generator") is None]
        sharded = per_rank_values(analysis) is not None
        for getitem, call in _random_items(analysis, process_wide if sharded else [], reading_index=False):  # (in any module: a dataset module of its own)
            if seeds_alike(analysis, "torch"):
                yield Match(
                    call,
                    f"`{getitem.name.value}()` ignores the index it is given and draws its sample with `{code_of(call)}` "
                    "from torch's random state, which every rank seeds alike: the DistributedSampler shares out indices "
                    "the dataset does not read, so every rank draws the same samples and the global batch holds N copies "
                    "of each; seed each rank differently after the wrap (torch.manual_seed(seed + runtime.rank())), or "
                    "draw from a generator seeded per rank",
                    fixable=False,
                )
        # The batches of every training loader count, sharded or not yet (a sampler of its own is left to a human,
        # and noise drawn alike stays alike once it is sharded).
        values = training_batch_values(analysis)
        if values is None:
            return
        for call in analysis.calls_to(STATE_DRAWS["random"]):
            if (
                not without_gradients(analysis, call)
                and _in_a_training_step(analysis, call)
                and _drawn_per_sample(analysis, values, call)
                and seeds_alike(analysis, "random", before=call, when_given=True)
            ):
                yield Match(
                    call,
                    f"`{code_of(call)}` draws a value for each sample of this process's batch from Python's random state, "
                    "which every rank seeds alike: every rank draws the same numbers, so the global batch holds N copies of "
                    "the same choices; seed each rank differently after the wrap (random.seed(seed + runtime.rank()))",
                    fixable=False,
                )
        for call in [*draws, *numpy_draws]:
            if without_gradients(analysis, call):
                continue
            sizing = (_sized_by_the_batch(analysis, values, call) if _in_a_training_step(analysis, call) else None) or (
                _sized_like_an_activation(analysis, call) if _in_a_trained_forward(analysis, call) else None
            )
            if sizing is not None:
                generator = keyword_argument(call, "generator")
                seeding = "np.random.seed" if call in numpy_draws else "torch.manual_seed"
                # (a seed the program draws only where none is given, DCGAN's ``opt.manualSeed``: alike in the runs given one)
                given = None
                if call in numpy_draws:
                    if not seeds_alike(analysis, "numpy", before=call, when_given=True):
                        continue
                    state = "numpy's random state"
                    given = seeded_alike_only_when_given(analysis, "numpy")
                elif generator is None and seeds_alike(analysis, "torch", before=call, when_given=True):
                    state = "torch's random state"
                    given = seeded_alike_only_when_given(analysis, "torch")
                elif generator is not None and generator_seeded_alike(analysis, generator.value):
                    state = f"the generator `{code_of(generator.value)}`"
                else:
                    continue
                alike = "which every rank seeds alike" + (f" whenever `{given}` is given (unset, each rank draws a seed of its own)" if given else "")
                if sizing == _FIRST_AXIS:
                    drawn = f"draws noise for each sample of this process's batch from {state}, {alike}: every rank"
                else:  # (``torch.randn(x.size(1))``: per feature, or per sample of a sequence-first tensor)
                    drawn = (
                        f"draws noise sized by an axis of this process's batch other than the first from {state}, {alike}: "
                        "if that axis holds the samples (a sequence-first tensor, as nn.LSTM and nn.Transformer take "
                        "without batch_first), every rank"
                    )
                yield Match(
                    call,
                    f"`{code_of(call)}` {drawn} draws the same numbers, so the global batch holds N copies of the same "
                    f"noise; seed each rank differently after the wrap ({seeding}(seed + runtime.rank())), or draw from a "
                    "generator seeded per rank",
                    fixable=False,
                )


def _drawn_per_sample(analysis: ScriptAnalysis, values: PerRankValues, call: cst.Call) -> bool:
    """Whether a scalar draw runs once per sample of this process's batch: in a loop or comprehension (within its
    function) over the batch (``for xi in x``) or over a range of its first axis (``for _ in range(x.size(0))``)."""
    for ancestor in analysis.ancestors(call):
        if isinstance(ancestor, cst.FunctionDef):
            return False
        iterated = ancestor.iter if isinstance(ancestor, (cst.For, cst.CompFor)) else None
        if isinstance(ancestor, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
            iterated = ancestor.for_in.iter
        if iterated is None:
            continue
        if values.mention(iterated) is not None and not (type(iterated) is cst.Call and dotted_name(iterated.func) == "range"):  # type: ignore[attr-defined]
            return True
        for node in walk(iterated):
            axis = _axis_read(analysis, node)
            if axis is not None and axis[1] == _FIRST_AXIS and values.mention(axis[0]) is not None:
                return True
    return False


def _loads_in_workers(analysis: ScriptAnalysis) -> bool:
    """Whether a loader of the program loads in worker processes (``num_workers`` other than 0, or a
    ``worker_init_fn``): their random states are seeded from torch's in the main process."""
    for module in analysis.shared.analyses:
        for loader in module.loader_calls:
            count = loader_argument(loader, "num_workers")
            if loader_argument(loader, "worker_init_fn") is not None or (count is not None and code_of(count.value).strip() != "0"):
                return True
    return False


def _in_a_training_step(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the draw runs in a loop that trains: its own, or one around a call of its function up the calls (the
    VAE's ``eps = torch.randn_like(std)`` in ``reparameterize``, run by the model's ``forward``)."""
    for home, place in analysis.places_up_the_calls(call):
        loop = home.nearest_loop(place)
        if loop is not None and home.reaches_backward(loop):
            return True
    return False


def _in_a_trained_forward(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the draw runs in the ``forward`` of a model class of the program (or a method it calls) that a wrap
    takes, or a wrapped model builds, in a program that trains: the VAE's ``eps = torch.randn_like(std)`` of ``reparameterize``, which the model's ``forward`` runs
    on every training step (a call of the model is no call of ``forward`` the call graph follows)."""
    owner = analysis.enclosing_class(call)
    forward = own_method(owner, "forward")
    if forward is None or not analysis.program_backward_calls:
        return False
    trained = wrapped_model_classes(analysis)
    if owner not in trained and not trained.intersection(analysis.shared.subclasses_of(owner)):  # type: ignore[arg-type]
        return False  # (a model no wrap takes, nor builds: a frozen sampler, a teacher)
    return analysis.reaches(forward, [call])


def _sized_like_an_activation(analysis: ScriptAnalysis, call: cst.Call) -> str | None:
    """How a draw in a forward takes its shape from a value the forward computes, not from the model's own state:
    by its first axis (:data:`_FIRST_AXIS`: ``torch.randn_like(std)``, ``torch.randn(h.size(0), d)``) or only by
    another (:data:`_OTHER_AXIS`: ``torch.randn(h.size(1))``); ``None`` for ``torch.randn_like(self.weight)``
    (noise on the weights, rightly the same on every rank) and a shape of constants."""
    arguments = [a.value for a in call.args if a.keyword is None or a.keyword.value in ("size", "sample_shape")]
    if call_method_name(call) in FILLING_DRAWS:
        return None
    if arguments and analysis.is_call_to(call, _SHAPED_LIKE_FIRST):
        return None if _the_models_own(analysis, arguments[0]) else _FIRST_AXIS
    found: str | None = None
    for argument in arguments:
        for node in walk(argument):
            read = _axis_read(analysis, node)
            if read is not None and not _the_models_own(analysis, read[0]):
                if read[1] == _FIRST_AXIS:
                    return _FIRST_AXIS
                found = _OTHER_AXIS
    return found


def _the_models_own(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> bool:
    """Whether an expression holds the model's own state: reached from ``self`` (``self.enc.weight``), directly
    or through a name every value of which is (``w = self.enc.weight``); an expression the analysis cannot name
    counts as such."""
    name = dotted_name(expr)
    if name is None or name.split(".")[0] == "self":
        return True
    values = analysis.flows_into(expr, name) if type(expr) is cst.Name else []
    return bool(values) and all((dotted_name(value) or "").split(".")[0] == "self" for value in values)


def _augmentations_drawn_alike(analysis: ScriptAnalysis) -> list[tuple[cst.FunctionDef, cst.Call, str]]:
    """Random augmentations in a dataset's ``__getitem__`` that reads its index, drawn from a random state
    (torch's or numpy's) that every rank seeds alike, in a program that trains a DDP model: the item, its first
    draw, and the seeding call that would part the ranks."""
    if not analysis.program_wrap_calls or not analysis.program_backward_calls or per_rank_values(analysis) is None or draws_per_rank(analysis):
        return []
    found = []
    torch_draws = [call for call in _draws(analysis) if keyword_argument(call, "generator") is None]
    for draws, state, seeding in ((torch_draws, "torch", "torch.manual_seed"), (list(analysis.calls_to(NUMPY_DRAWS)), "numpy", "np.random.seed")):
        if draws and seeds_alike(analysis, state):
            found += [(getitem, call, seeding) for getitem, call in _random_items(analysis, draws, reading_index=True)]
    return found


def _dropout_drawn_alike(analysis: ScriptAnalysis) -> cst.Call | None:
    """The module's first dropout (``nn.Dropout(p)``, ``F.dropout(x, p)``, ``nn.GRU(..., dropout=p)``, p not 0), in a
    program that trains a DDP model on sharded data and seeds torch's random state alike on every rank."""
    found = next((call for call in analysis.calls if _drops(analysis, call)), None)
    if found is None or not analysis.program_wrap_calls or not analysis.program_backward_calls:
        return None
    if per_rank_values(analysis) is None or draws_per_rank(analysis) or not seeds_alike(analysis, "torch"):
        return None
    return found


def _drops(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the call makes or runs a dropout whose rate is not a literal 0."""
    qualified = analysis.qualified_names(call.func)
    if any(q.startswith("torch.nn.") and "Dropout" in q.rsplit(".", 1)[-1] for q in qualified):
        rate = call.args[0].value if call.args and call.args[0].keyword is None else getattr(keyword_argument(call, "p"), "value", None)
    elif qualified & {"torch.nn.functional.dropout", "torch.dropout"}:
        positional = [a.value for a in call.args if a.keyword is None]
        rate = positional[1] if len(positional) > 1 else getattr(keyword_argument(call, "p"), "value", None)
        training = keyword_argument(call, "training")
        if training is not None and dotted_name(training.value) == "False":
            return False
    elif any(q.startswith("torch.nn.") for q in qualified) and keyword_argument(call, "dropout") is not None:
        rate = keyword_argument(call, "dropout").value  # type: ignore[union-attr]  # ``nn.GRU(..., dropout=0.2)``
    elif call_method_name(call) in FILLING_DRAWS and _in_a_forward(analysis, call):
        return True  # a drop-path mask drawn in the model (``x.new_empty(B, 1).bernoulli_(keep)``): a dropout of its own
    else:
        return False
    return rate is None or not (type(rate) in (cst.Integer, cst.Float) and float(rate.value) == 0.0)  # type: ignore[attr-defined]


def _in_a_forward(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the call runs in a ``forward()`` of a class (a model's own layers draw there)."""
    function = analysis.enclosing_function(call)
    return function is not None and function.name.value == "forward" and analysis.enclosing_class(call) is not None


def _draws(analysis: ScriptAnalysis) -> list[cst.Call]:
    """The calls that draw values from torch's random state: torch's sampling functions, the methods that fill
    a tensor with draws, and the sampling methods of a ``torch.distributions`` object."""
    found = list(analysis.calls_to(VALUE_DRAWS))
    for call in analysis.calls:
        method = call_method_name(call)
        if method in FILLING_DRAWS:
            found.append(call)
        elif is_distribution_draw(analysis, call):
            found.append(call)
    return found


def _random_items(analysis: ScriptAnalysis, draws: list[cst.Call], reading_index: bool) -> Iterator[tuple[cst.FunctionDef, cst.Call]]:
    """The ``__getitem__(self, idx)`` methods that draw (one of ``draws``, in them or in what they call), with their
    first draw: those that
    never read their index (``reading_index=False``: a nanoGPT-style dataset of random windows), or those that
    do (a random augmentation of the sample they read: ``x + torch.randn(4)``)."""
    for function in analysis.functions:
        if function.name.value != "__getitem__" or analysis.enclosing_class(function) is None:
            continue
        params = function.params.params
        if len(params) != 2:
            continue
        index = params[1].name.value
        if any(type(n) is cst.Name and n.value == index for n in walk(function.body)) is not reading_index:  # type: ignore[attr-defined]
            continue
        draw = next((call for call in draws if analysis.is_inside(call, function)), None)
        if draw is None and analysis.reaches(function, draws):  # ``return self.augment(x)``: a helper draws
            draw = next((call for call in draws if analysis.reaches(function, [call])), None)
        if draw is not None:
            yield function, draw


def _sized_by_the_batch(analysis: ScriptAnalysis, values: PerRankValues, call: cst.Call) -> str | None:
    """How the draw's shape follows a value of this process's batch: by its first axis (:data:`_FIRST_AXIS`:
    ``torch.randn_like(x)``, a size argument reading ``x.size(0)``, ``x.shape[0]`` or ``len(x)`` of one, directly or
    through a name assigned from it: ``b_size = real.size(0)``) or only by another (:data:`_OTHER_AXIS`:
    ``x.size(1)``); ``None`` where it does not."""
    method = call_method_name(call)
    if method in FILLING_DRAWS:  # the tensor filled: ``torch.empty(x.size(0), nz).normal_()``
        receiver = call.func.value  # type: ignore[attr-defined]
        sizings = {
            _sized_by_the_batch(analysis, values, origin)  # type: ignore[arg-type]
            for origin in analysis.origins(receiver)
            if type(origin) is cst.Call and (analysis.is_call_to(origin, _FACTORIES) or call_method_name(origin) in _NEW_TENSOR_METHODS)  # type: ignore[arg-type]
        }
        return _FIRST_AXIS if _FIRST_AXIS in sizings else _OTHER_AXIS if _OTHER_AXIS in sizings else None
    if method in DISTRIBUTION_DRAWS and not analysis.is_call_to(call, VALUE_DRAWS):  # parameters of this process's batch
        origins = [o for o in analysis.origins(call.func.value) if type(o) is cst.Call]  # type: ignore[attr-defined]
        if any(values.mention(arg.value) is not None for origin in origins for arg in origin.args):  # type: ignore[attr-defined]
            return _FIRST_AXIS
        # or a sample shape of its size (``Normal(0, 1).sample((x.size(0), nz))``), read below
    arguments = [a.value for a in call.args if a.keyword is None or a.keyword.value in ("size", "sample_shape")]
    numpy = next((q.rsplit(".", 1)[-1] for q in analysis.qualified_names(call.func) if q in NUMPY_DRAWS), None)  # type: ignore[arg-type]
    if numpy is not None and NUMPY_SIZE_POSITIONS[numpy] is not None:
        # (``np.random.randint(0, x.size(1))``: its bounds are no size; one draw for the step)
        position = NUMPY_SIZE_POSITIONS[numpy]
        positional = [a.value for a in call.args if a.keyword is None]
        arguments = [a.value for a in call.args if a.keyword is not None and a.keyword.value == "size"]
        arguments += positional[position : position + 1]  # type: ignore[operator]
    if arguments and analysis.is_call_to(call, _SHAPED_LIKE_FIRST) and values.mention(arguments[0]) is not None:
        return _FIRST_AXIS
    found: str | None = None
    for argument in arguments:
        reads = [argument]
        for node in walk(argument):
            name = dotted_name(node) if type(node) is cst.Name else None
            if name is not None:
                reads.extend(analysis.flows_into(node, name))
        for read in reads:
            for node in walk(read):
                axis = _axis_read(analysis, node)
                if axis is not None and values.mention(axis[0]) is not None:
                    if axis[1] == _FIRST_AXIS:
                        return _FIRST_AXIS
                    found = _OTHER_AXIS
    return found


#: A draw sized by a value's first axis (``x.size(0)``, ``x.shape``, ``len(x)``, ``torch.randn_like(x)``, an axis the
#: code computes): one value per sample where the batch is the first axis, as it is but for sequence-first tensors.
_FIRST_AXIS = "first axis"
#: A draw sized only by another axis (``x.size(1)``, ``x.shape[-1]``, ``x.shape[1:]``): per feature, or per sample of
#: a sequence-first tensor (the analysis knows no tensor's layout).
_OTHER_AXIS = "other axis"


def _axis_read(analysis: ScriptAnalysis, node: cst.CSTNode) -> tuple[cst.BaseExpression, str] | None:
    """The tensor whose axis length the node reads, and whether the axis is the first (:data:`_FIRST_AXIS`: ``x`` of
    ``x.size(0)``, ``x.size()``, ``x.shape``, ``x.shape[0]``, ``x.shape[:1]``, ``len(x)``, an axis the code computes)
    or another (:data:`_OTHER_AXIS`: ``x.size(1)``, ``x.shape[1:]``, ``x.shape[-1]``, which is the first of a tensor
    of one axis); ``None`` for anything else."""
    if type(node) is cst.Call:
        if call_method_name(node) == "size":  # type: ignore[arg-type]
            axis = node.args[0].value if node.args else None  # type: ignore[attr-defined]
            return node.func.value, _FIRST_AXIS if axis is None or _may_be_zero(axis) else _OTHER_AXIS  # type: ignore[attr-defined]
        if dotted_name(node.func) == "len" and len(node.args) == 1:  # type: ignore[attr-defined]
            return node.args[0].value, _FIRST_AXIS  # type: ignore[attr-defined]
        return None
    if type(node) is not cst.Attribute or node.attr.value != "shape":  # type: ignore[attr-defined]
        return None
    parent = analysis.parent(node)
    if type(parent) is cst.Subscript and parent.value is node and len(parent.slice) == 1:  # type: ignore[attr-defined]
        index = parent.slice[0].slice  # type: ignore[attr-defined]
        if type(index) is cst.Index and not _may_be_zero(index.value):
            return node.value, _OTHER_AXIS  # type: ignore[attr-defined]
        if type(index) is cst.Slice and index.lower is not None and not _may_be_zero(index.lower):
            return node.value, _OTHER_AXIS  # type: ignore[attr-defined]
    return node.value, _FIRST_AXIS  # type: ignore[attr-defined]


def _may_be_zero(axis: cst.BaseExpression) -> bool:
    """Whether an axis may be the first: ``0``, or one the code computes; not another literal (``1``, ``-1``)."""
    if type(axis) is cst.Integer:
        return int(axis.value, 0) == 0  # type: ignore[attr-defined]
    return not (type(axis) is cst.UnaryOperation and type(axis.expression) is cst.Integer)  # type: ignore[attr-defined]
