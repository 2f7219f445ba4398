"""DDP050 batch-compared-with-itself."""

from __future__ import annotations

import ast
from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, keyword_argument, walk
from .analysis.batch_axis import NONLINEAR_REDUCTIONS, reduced_axis_zero, used_nonlinearly
from .analysis.loaders import without_gradients
from .analysis.per_rank import PerRankValues, per_rank_values
from .analysis.ranks import calls_feeding_the_losses
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of

#: Calls that multiply two matrices (``torch.mm(a, b.t())``) or measure every pair of rows (``torch.cdist``).
_PRODUCTS = frozenset({"torch.mm", "torch.matmul"})
_PAIRWISE = frozenset({"torch.cdist"})


def _transposed(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """What ``x.t()``, ``x.T``, ``x.transpose(0, 1)`` or ``x.permute(1, 0)`` turns rows into columns of: the
    batch's rows become columns, so a product with it compares samples with each other. Not ``x.mT`` or
    ``transpose(-2, -1)`` (attention over the positions of each sample, as often as a matrix of embeddings)."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "T":
        return expr.value
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)):
        return None
    method = call_method_name(expr)
    arguments = [code_of(a.value).strip() for a in expr.args]
    if (method == "t" and not arguments) or (method == "transpose" and sorted(arguments) == ["0", "1"]) or (
        method == "permute" and arguments == ["1", "0"]
    ):
        return expr.func.value
    return None


class BatchComparedWithItself(Rule):
    """Review a loss that compares each sample with the other samples of its batch, or uses a batch statistic.

    What it finds, in a program that trains a ``DistributedDataParallel`` model on sharded data: a matrix
    product of two values computed from this process's batch, the second with its samples turned into
    columns (``z @ z.t()``, ``torch.mm(a, b.T)``, ``torch.matmul(q, k.transpose(0, 1))``,
    ``torch.einsum("id,jd->ij", a, b)``), or the distances between every pair of their rows
    (``torch.cdist(a, b)``, ``F.cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=-1)``, a product or difference
    broadcast by hand: ``(a[:, None, :] * b[None, :, :]).sum(-1)``), where gradients are taken (not under
    ``torch.no_grad()``): the similarity matrix of a contrastive loss (SimCLR's NT-Xent, CLIP, InfoNCE with
    in-batch negatives) or of in-batch hard-negative mining. Also a statistic over the batch axis (``g.mean(0)``,
    ``z.var(dim=0)``) of such a value that enters a non-linear function on its way to a loss term: a mixture of
    experts' load-balancing loss (``(usage ** 2).sum()``), VICReg's variance term, a centred square. The
    model's own ``forward()`` counts: a call of the model hands it the step's batch.

    Why it is a problem: under DDP each process holds its share of the batch only, so each sample is
    compared with 1/N of the samples it met in the original: the loss sees N times fewer negatives, and
    the training computes something else, without an error (a trial's SimCLR: loss 1.86 against 2.52, the
    weights off by 6e-3 after 3 epochs). DDP averages gradients; it does not join batches.

    A batch statistic is the statistic of the rank's share: a mean used linearly is still right (DDP averages
    the gradients of the shares' means), a squared or normalised one is not.

    What a human must do: gather the embeddings of every rank before the comparison, with a gather that
    keeps the gradient (``torch.distributed.nn.functional.all_gather``), and compare the local samples with
    the gathered ones (the labels of the positives shift by this rank's offset); all-reduce a batch statistic
    before its non-linear use (``torch.distributed.nn.functional.all_reduce``, divided by the world size); or
    accept the smaller comparison set or the per-process statistic (and say so).
    """

    code = "DDP050"
    name = "batch-compared-with-itself"
    phase = Phase.OUTPUT
    severity = Severity.WARNING
    triggers = ("@", "mm(", "matmul(", "cdist(", "einsum(", "cosine_similarity(", "pairwise_distance(", "inner(", "linear(", "tensordot(", "CosineSimilarity(", "PairwiseDistance(", "(0", "dim=0", "axis=0", "None", "sort(", "topk(", "kthvalue(")
    requires = ("backward", "zero_grad")
    needs_names = (names.DISTRIBUTED_DATA_PARALLEL,)
    manual_fix = "all_gather the embeddings of every rank (torch.distributed.nn.functional.all_gather) before comparing"
    examples = (
        Example(
            before="""\
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

model = DistributedDataParallel(net)
loader = DataLoader(pairs, batch_size=32, sampler=DistributedSampler(pairs))
for v1, v2 in loader:
    z = F.normalize(torch.cat([model(v1), model(v2)]), dim=1)
    similarity = z @ z.t() / 0.5
    loss = F.cross_entropy(similarity.fill_diagonal_(-1e9), targets)
    loss.backward()
""",
        ),
        Example(
            before="""\
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

model = DistributedDataParallel(net)
loader = DataLoader(pairs, batch_size=32, sampler=DistributedSampler(pairs))
for images, texts in loader:
    logits = torch.einsum("id,jd->ij", model(images), model(texts))
    loss = F.cross_entropy(logits, torch.arange(len(images)))
    loss.backward()
""",
        ),
        # The same similarity matrix by broadcasting (a trial's SimCLR): a row against every row.
        Example(
            before="""\
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

model = DistributedDataParallel(net)
loader = DataLoader(pairs, batch_size=32, sampler=DistributedSampler(pairs))
for v1, v2 in loader:
    z = torch.cat([model(v1), model(v2)])
    similarity = F.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=2)
    loss = F.cross_entropy(similarity.fill_diagonal_(-1e9), targets)
    loss.backward()
""",
        ),
        # A load-balancing term of a mixture of experts: the square of the batch's mean gate usage.
        Example(
            before="""\
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

model = DistributedDataParallel(net)
loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
for x, y in loader:
    out, gates = model(x)
    loss = F.mse_loss(out, y) + 0.01 * (gates.mean(0) ** 2).sum()
    loss.backward()
""",
        ),
        # A mean over the batch used linearly: the shares' means average to the batch's.
        Valid(
            """\
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

model = DistributedDataParallel(net)
loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
for x, y in loader:
    errors = (model(x) - y).pow(2)
    loss = errors.mean(0).sum()
    loss.backward()
"""
        ),
        Valid(
            """\
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

model = DistributedDataParallel(net)
loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
for x, y in loader:
    h = model(x)
    scores = h @ classifier.weight.t()
    attention = h @ h.transpose(-2, -1)
    within = torch.einsum("bqd,bkd->bqk", h, h)
    loss = F.cross_entropy(scores, y) + attention.mean() + within.mean()
    loss.backward()
    with torch.no_grad():
        retrieval = h @ h.t()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.program_wrap_calls:
            return
        values = per_rank_values(analysis)
        if values is None:
            return  # no sharded data: every rank holds the whole batch
        for node, left, right, how in _comparisons(analysis):
            if values.mention(left) is None or values.mention(right) is None or _per_sample(analysis, values, node):
                continue
            # (one operand detached still trains the other against every sample of the batch: ``q @ k.detach().t()``)
            if without_gradients(analysis, node) or (_detached(left) and _detached(right)) or _only_measured(analysis, node):
                if _picks_training_samples(analysis, values, node):
                    yield Match(
                        node,
                        f"`{code_of(node)}` {how} the samples of this process's batch with each other to pick the samples a "
                        "training loss takes (in-batch mining): under DDP each rank holds 1/N of the batch, so every sample's "
                        "hardest positive and negative are sought among N times fewer others than the original did; "
                        "all_gather the embeddings of every rank to mine among them, or accept the smaller pool",
                        fixable=False,
                    )
                continue
            if _stored_state(left) or _stored_state(right):
                continue  # ``z @ self.memory.clone().t()``: a bank the model keeps (its writes are DDP046's), not this batch
            yield Match(
                node,
                f"`{code_of(node)}` {how} the samples of this process's batch with each other: under DDP each rank "
                "holds 1/N of the batch, so the loss compares every sample with N times fewer others than the "
                "original did; all_gather the embeddings of every rank first (torch.distributed.nn.functional.all_gather "
                "keeps the gradient), or accept the smaller comparison set",
                fixable=False,
            )
        feeding: frozenset[cst.Call] | None = None
        for call in analysis.calls:
            selected = _selected_over_the_batch(analysis, call)
            if selected is None or values.mention(selected) is None or without_gradients(analysis, call) or _detached(selected):
                continue
            feeding = calls_feeding_the_losses(analysis) if feeding is None else feeding
            function = analysis.enclosing_function(call)
            # (in a loss module's forward: ``criterion(out, y)`` of ``criterion = OhemCELoss()`` feeds the loss)
            if call not in feeding and not (function is not None and any(analysis.model_forward(c) is function for c in feeding)):
                continue
            yield Match(
                call,
                f"`{code_of(call).strip()}` orders the values of every sample of this process's batch to keep some of "
                "them (hard-example mining, OHEM): under DDP each rank holds 1/N of the batch, so a fixed number kept "
                "(n_min, k) is N times more of each share than the original kept of the whole batch, and a threshold "
                "meets other values; all_gather the values across ranks to select among them, or accept the per-process selection",
                fixable=False,
            )
        for call in analysis.calls:
            found = reduced_axis_zero(analysis, call)
            if found is None or without_gradients(analysis, call):
                continue
            reduction, reduced = found
            if values.mention(reduced) is None or _detached(reduced) or _only_measured(analysis, call) or _per_sample(analysis, values, call):
                continue
            if not used_nonlinearly(analysis, call, reduction in NONLINEAR_REDUCTIONS):
                continue  # a mean of this process's share used linearly, or no loss term: DDP's averaged gradients are the original's
            yield Match(
                call,
                f"`{code_of(call)}` is a statistic of this process's batch that the loss uses non-linearly: under DDP "
                "each rank holds 1/N of the batch, so the statistic (a load-balancing or variance term, a normalisation) "
                "is that of the rank's share, not of the batch the original saw; all_reduce it across ranks first "
                "(torch.distributed.nn.functional.all_reduce keeps the gradient), or accept the per-process statistic",
                fixable=False,
            )


def _comparisons(analysis: ScriptAnalysis) -> Iterator[tuple[cst.CSTNode, cst.BaseExpression, cst.BaseExpression, str]]:
    """Every product of a value with a transposed value, and every pairwise distance, in the module: (the
    node, its two operands, what it does)."""
    for node in analysis.preorder:
        if type(node) is cst.BinaryOperation and isinstance(node.operator, cst.MatrixMultiply):  # type: ignore[attr-defined]
            inner = _transposed(node.right)  # type: ignore[attr-defined]
            if inner is not None:
                yield node, node.left, inner, "multiplies"  # type: ignore[attr-defined]
        elif type(node) is cst.BinaryOperation and isinstance(node.operator, (cst.Multiply, cst.Subtract)):  # type: ignore[attr-defined]
            # ``(z[:, None, :] * z[None, :, :]).sum(-1)``, ``(a.unsqueeze(1) - b.unsqueeze(0)).norm(dim=-1)``
            first, second = _with_new_axis(node.left), _with_new_axis(node.right)  # type: ignore[attr-defined]
            if first is not None and second is not None and first[1] != second[1]:
                yield node, first[0], second[0], "compares"
    for call in analysis.calls:
        if call_method_name(call) in ("mm", "matmul") and isinstance(call.func, cst.Attribute) and len(call.args) == 1:
            if not analysis.qualified_names(call.func) & _PRODUCTS:  # ``a.mm(b.t())``: the tensor's method
                inner = _transposed(call.args[0].value)
                if inner is not None:
                    yield call, call.func.value, inner, "multiplies"
    for call in analysis.calls_to(_ROW_PRODUCTS):
        # ``torch.inner(a, b)``, ``F.linear(a, b)``: every row of one with every row of the other (a batch as the
        # weight of ``linear``; a layer's own weight is no value of the batch and is left alone below)
        operands = [a.value for a in call.args if a.keyword is None]
        if len(operands) >= 2:
            yield call, operands[0], operands[1], "multiplies"
    for call in analysis.calls_to(_EINSUM):
        operands = [a.value for a in call.args if a.keyword is None]
        if len(operands) == 2 and isinstance(operands[1], (cst.List, cst.Tuple)):  # ``einsum("nc,mc->nm", [a, b])``
            operands = [operands[0], *(e.value for e in operands[1].elements)]
        if len(operands) == 3 and isinstance(operands[0], cst.SimpleString) and _compares_rows(operands[0].evaluated_value):
            yield call, operands[1], operands[2], "multiplies"
    for call in analysis.calls_to(_TENSORDOT):
        operands = [a.value for a in call.args if a.keyword is None]
        dims = keyword_argument(call, "dims")
        contracted = dims.value if dims is not None else operands[2] if len(operands) >= 3 else None
        if len(operands) >= 2 and contracted is not None and _contracts_the_features(contracted):
            yield call, operands[0], operands[1], "multiplies"
    layers = bool(analysis.calls_to(_MEASURE_LAYERS))
    for call in analysis.calls:
        if analysis.is_call_to(call, _BROADCAST_MEASURES) or (layers and _runs_a_measure_layer(analysis, call)):
            pair = _broadcast_pairs(call)
            if pair is not None:
                yield call, pair[0], pair[1], "compares"
    for call in analysis.calls_to(_PRODUCTS | _PAIRWISE):
        operands = [a.value for a in call.args if a.keyword is None]
        if len(operands) < 2:
            continue
        if analysis.is_call_to(call, _PAIRWISE):
            yield call, operands[0], operands[1], "measures the distances between"
            continue
        inner = _transposed(operands[1])
        if inner is not None:
            yield call, operands[0], inner, "multiplies"


_EINSUM = frozenset({"torch.einsum"})
#: Products of every row of one tensor with every row of another, no transpose written.
_ROW_PRODUCTS = frozenset({"torch.inner", "torch.nn.functional.linear"})
#: Functions that compare two tensors along a dimension, broadcasting the others (``F.cosine_similarity``).
_BROADCAST_MEASURES = frozenset(
    {"torch.nn.functional.cosine_similarity", "torch.cosine_similarity", "torch.nn.functional.pairwise_distance", "torch.pairwise_distance"}
)


#: ``torch.tensordot(a, b, dims=([1], [1]))``: with the feature axis of both contracted, every row meets every row.
_TENSORDOT = frozenset({"torch.tensordot"})
#: Layers that compare two tensors along a dimension (``nn.CosineSimilarity(dim=2)``, a loss's ``self.similarity_f``).
_MEASURE_LAYERS = frozenset({"torch.nn.CosineSimilarity", "torch.nn.PairwiseDistance"})


def _contracts_the_features(dims: cst.BaseExpression) -> bool:
    """Whether tensordot's ``dims`` contracts the second (last) axis of each of two matrices, and only it:
    ``([1], [1])``, ``((-1,), (-1,))``."""
    try:
        value = ast.literal_eval(code_of(dims).strip())
    except (ValueError, SyntaxError):
        return False
    if not (isinstance(value, (list, tuple)) and len(value) == 2):
        return False
    axes = [list(part) if isinstance(part, (list, tuple)) else [part] for part in value]
    return all(part in ([1], [-1]) for part in axes)


def _runs_a_measure_layer(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the call runs a layer of :data:`_MEASURE_LAYERS`: built in place (``nn.CosineSimilarity(dim=2)(a,
    b)``) or held in a name or attribute (``self.similarity_f = nn.CosineSimilarity(dim=2)``)."""
    func = call.func
    if type(func) is cst.Call:
        return analysis.is_call_to(func, _MEASURE_LAYERS)
    if type(func) not in (cst.Name, cst.Attribute):
        return False
    return any(type(origin) is cst.Call and analysis.is_call_to(origin, _MEASURE_LAYERS) for origin in analysis.origins(func))  # type: ignore[arg-type]


#: Selections by order: ``torch.sort(loss)``, ``loss.topk(k)``, ``torch.kthvalue(loss, k)``.
_ORDER_SELECTIONS = frozenset({"torch.sort", "torch.topk", "torch.kthvalue", "torch.argsort"})
_ORDER_METHODS = frozenset({"sort", "topk", "kthvalue", "argsort"})
#: Methods that lay every value of a tensor out along one axis (the samples' with the rest).
_FLATTENING = frozenset({"flatten", "ravel"})


def _selected_over_the_batch(analysis: ScriptAnalysis, call: cst.Call) -> cst.BaseExpression | None:
    """The tensor laid out flat (``x.view(-1)``, ``x.flatten()``, held in a name assigned so) whose top values the
    call sorts or picks, its one axis then holding every sample of the batch; ``None`` for any other call."""
    if analysis.is_call_to(call, _ORDER_SELECTIONS):
        if not call.args:
            return None
        selected = call.args[0].value
    elif call_method_name(call) in _ORDER_METHODS and type(call.func) is cst.Attribute:
        selected = call.func.value  # type: ignore[attr-defined]
    else:
        return None
    values = [selected]
    if type(selected) is cst.Name:
        values += [v for v in analysis.flows_into(selected, selected.value) if isinstance(v, cst.BaseExpression)]
    return selected if any(_flat(value) for value in values) else None


def _flat(expr: cst.BaseExpression) -> bool:
    """``x.view(-1)``, ``x.reshape(-1)``, ``x.flatten()``: every value along one axis."""
    if type(expr) is not cst.Call or type(expr.func) is not cst.Attribute:
        return False
    method = expr.func.attr.value
    if method in _FLATTENING and not any(a.keyword is None and code_of(a.value).strip() not in ("0",) for a in expr.args):
        return True
    return method in ("view", "reshape") and [code_of(a.value).strip() for a in expr.args] == ["-1"]


def _with_new_axis(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
    """``z.unsqueeze(1)`` or ``z[:, None]`` (a new axis after the batch's: ``"after"``), ``z.unsqueeze(0)`` or
    ``z[None]`` (a new axis before it: ``"before"``), with the tensor under the new axis."""
    if isinstance(expr, cst.Call) and call_method_name(expr) == "unsqueeze" and len(expr.args) == 1:
        where = code_of(expr.args[0].value).strip()
        if where in ("0", "1"):
            return expr.func.value, "before" if where == "0" else "after"  # type: ignore[attr-defined]
    if isinstance(expr, cst.Subscript) and expr.slice:
        parts = [code_of(e.slice).strip() for e in expr.slice]
        if parts[0] == "None" and "None" not in parts[1:]:
            return expr.value, "before"
        if len(parts) >= 2 and parts[0] == ":" and parts[1] == "None":
            return expr.value, "after"
    return None


def _broadcast_pairs(call: cst.Call) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """The two tensors a ``cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=-1)`` compares row by row, each
    row of one with every row of the other (one gets a new axis after its batch axis, the other before)."""
    operands = [a.value for a in call.args if a.keyword is None][:2]
    if len(operands) != 2:
        return None
    first, second = _with_new_axis(operands[0]), _with_new_axis(operands[1])
    if first is None or second is None or first[1] == second[1]:
        return None
    return first[0], second[0]


def _compares_rows(equation: object) -> bool:
    """Whether an einsum equation of two operands keeps the first index of each apart in its output
    (``"id,jd->ij"``, ``"nc,mc->nm"``): every row of the first meets every row of the second."""
    if not isinstance(equation, str) or "..." in equation:
        return False
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    operands = inputs.split(",")
    if not arrow or len(operands) != 2 or not all(operands):
        return False
    first, second = operands[0][0], operands[1][0]
    return first != second and first not in operands[1] and second not in operands[0] and first in output and second in output


#: What turns a similarity matrix into a number to look at (an accuracy, a retrieval rank), not a loss.
_MEASURES = frozenset({"item", "argmax", "argmin", "tolist", "topk"})


def _picks_training_samples(analysis: ScriptAnalysis, values: PerRankValues, node: cst.CSTNode, depth: int = 0) -> bool:
    """Whether what a comparison computes without gradients (indices: ``d = torch.cdist(emb, emb)``, ``pos =
    d.argmax(1)``) ends up indexing a per-rank value where gradients are taken (``triplet(emb, emb[pos],
    emb[neg])``): in-batch mining, followed through the names of its function and, where the function returns
    them, into its callers (a few calls up)."""
    home = analysis.shared.analysis_of(node) or analysis
    function = home.enclosing_function(node)
    statement = home.statement(node)
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    tainted = {name for _, name in home.names_in_target(small.targets[0].target)} if isinstance(small, cst.Assign) and len(small.targets) == 1 else set()
    if isinstance(small, cst.Return):
        return depth < 2 and function is not None and any(
            _picks_training_samples(analysis, values, call, depth + 1) for call in home.callers_in_program(function)
        )
    return bool(tainted) and _indexes_with(analysis, values, home, function, tainted, depth)


def _indexes_with(
    analysis: ScriptAnalysis, values: PerRankValues, home: ScriptAnalysis, function: cst.FunctionDef | None, tainted: set[str], depth: int
) -> bool:
    """Whether, in the function (names tainted by a comparison, spread through its assignments), a per-rank value
    is indexed by a tainted name where gradients are taken, or a tainted name is returned to callers that do."""

    def mentions(expr: cst.CSTNode) -> bool:
        return any(type(n) in (cst.Name, cst.Attribute) and dotted_name(n) in tainted for n in home.nodes_below(expr))

    assignments = [a for a in home.assignments_in(function) if isinstance(a, cst.Assign) and a.value is not None]
    for _ in range(5):
        grown = {
            name
            for assign in assignments
            if mentions(assign.value)
            for target in assign.targets
            for _, name in home.names_in_target(target.target)
        } - tainted
        if not grown:
            break
        tainted |= grown
    scope = function if function is not None else home.module
    for node in home.nodes_below(scope):
        if type(node) is cst.Subscript and home.enclosing_function(node) is function and any(mentions(e.slice) for e in node.slice):  # type: ignore[attr-defined]
            if values.mention(node.value) is not None and not without_gradients(home, node) and not _detached(node.value):  # type: ignore[attr-defined]
                if _feeds_a_loss(analysis, home, node, function):
                    return True
        elif type(node) is cst.Return and node.value is not None and function is not None and depth < 2 and mentions(node.value):  # type: ignore[attr-defined]
            if home.enclosing_function(node) is function and any(
                _picks_training_samples(analysis, values, call, depth + 1) for call in home.callers_in_program(function)
            ):
                return True
    return False


def _feeds_a_loss(analysis: ScriptAnalysis, home: ScriptAnalysis, node: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
    """Whether a value reaches a loss ``backward()`` is called on: a call around it, or one that reads the name it
    is assigned to in its function, is among the calls feeding the losses (``triplet(emb, emb[pos], emb[neg])``;
    not ``(y[nearest] == y).float().mean()``, a retrieval accuracy logged beside the training)."""
    feeding = calls_feeding_the_losses(analysis)
    statement = home.statement(node)
    for ancestor in home.ancestors(node):
        if ancestor is statement:
            break
        if type(ancestor) is cst.Call and ancestor in feeding:
            return True
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    if not isinstance(small, cst.Assign):
        return False
    names = {name for target in small.targets for _, name in home.names_in_target(target.target)}
    scope = function if function is not None else home.module
    return any(
        type(call) is cst.Call
        and call in feeding
        and home.enclosing_function(call) is function
        and any(type(n) is cst.Name and n.value in names for n in home.nodes_below(call))  # type: ignore[attr-defined]
        for call in home.nodes_below(scope)
    )


def _detached(expr: cst.BaseExpression) -> bool:
    """Whether an operand is cut from the graph (``a.detach()``): no gradient flows through the comparison."""
    return any(isinstance(n, cst.Call) and call_method_name(n) == "detach" for n in walk(expr))


def _stored_state(expr: cst.BaseExpression) -> bool:
    """Whether an operand is state the model keeps between steps (``self.memory``, ``self.queue.clone()``), read
    through methods that keep its rows: not the samples of this batch."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        expr = expr.func.value
    name = dotted_name(expr) or ""
    return name.startswith("self.") and name.count(".") == 1


def _only_measured(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether the comparison's value is turned into a measure in its own expression (``(a @ b.t()).argmax(1)``)."""
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, cst.BaseStatement):
            return False
        if isinstance(ancestor, cst.Call) and call_method_name(ancestor) in _MEASURES:
            return True
    return False


def _per_sample(analysis: ScriptAnalysis, values: PerRankValues, node: cst.CSTNode) -> bool:
    """Whether the comparison runs in a loop over the samples of the batch (``for x, adj in zip(xb, ab):``), so
    it compares the parts of one sample (a graph's nodes), not the samples with each other."""
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return False
        if isinstance(ancestor, cst.For) and values.mention(ancestor.iter) is not None:
            return True
    return False
