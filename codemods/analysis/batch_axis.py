"""Reductions over the batch axis: ``g.mean(0)``, ``torch.std(z, dim=0)``, a statistic of the batch as a whole.

Under DDP each process holds its share of the batch, so a statistic over axis 0 is the statistic of that
share. Two rules ask: the loss-scale rule (a ``.sum()`` of a value whose batch axis a mean already removed
sums no batch: ``(usage.mean(0) ** 2).sum()`` sums over experts) and the rule that reviews a loss depending
on the batch as a whole (a load-balancing term, a variance regulariser).
"""

from __future__ import annotations

import libcst as cst

from .legacy import int_value
from .script import ScriptAnalysis, call_method_name

#: Methods (and ``torch.`` functions) that reduce a tensor along the dimensions they are given.
REDUCTIONS = frozenset({"mean", "sum", "std", "var", "logsumexp", "amax", "amin", "prod", "nanmean", "nansum"})
#: Of those, the ones whose value is no linear function of the samples (a mean of a share is a share of the
#: mean; the spread or the largest value of a share is not that of the batch).
NONLINEAR_REDUCTIONS = frozenset({"std", "var", "logsumexp", "amax", "amin", "prod"})
#: Operations that keep a tensor's axes (``(m ** 2)``, ``m.pow(2)``, ``m.abs()``): the spine of an expression.
_ELEMENTWISE = frozenset({"pow", "abs", "square", "sqrt", "exp", "log", "clamp", "float", "double", "half", "to", "contiguous"})


def reduced_axis_zero(analysis: ScriptAnalysis, call: cst.Call) -> tuple[str, cst.BaseExpression] | None:
    """The reduction a call makes over axis 0 and axis 0 only (``x.mean(0)``, ``x.std(dim=0)``,
    ``torch.mean(x, 0)``), by name, with the tensor it reduces; ``None`` for any other call (``x.mean()``,
    ``x.mean(1)``, ``x.sum((0, 1))``)."""
    method = call_method_name(call)
    if method not in REDUCTIONS or not isinstance(call.func, cst.Attribute):
        return None
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    dims = [a.value for a in call.args if a.keyword is not None and a.keyword.value in ("dim", "axis")]
    qualified = analysis.qualified_names(call.func)
    reduced: cst.BaseExpression = call.func.value
    if f"torch.{method}" in qualified:
        given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "input"), None)
        if given is None and not positional:
            return None
        # (``torch.mean(x, 0)``: the tensor first, or ``input=``)
        reduced, positional = (given, positional) if given is not None else (positional[0], positional[1:])
    elif any(q.startswith(("torch.", "numpy.", "math.", "builtins.")) for q in qualified):
        return None
    axes = dims or positional[:1]
    if len(axes) != 1 or int_value(axes[0]) != 0:
        return None
    return method, reduced


def batch_axis_reduced(analysis: ScriptAnalysis, expr: cst.BaseExpression, depth: int = 3) -> cst.Call | None:
    """The reduction over axis 0 that an expression's value keeps the shape of: the expression is that
    reduction, or an element-wise function of it alone (``usage.mean(0) ** 2``, ``m.pow(2)``, ``2 * m``), or a
    name bound to such a value in straight-line code before it. ``None`` when the batch axis may still be
    there (``x - x.mean(0)`` keeps every sample)."""
    current: cst.BaseExpression = expr
    for _ in range(12):
        kind = type(current)
        if kind is cst.Call:
            if reduced_axis_zero(analysis, current) is not None:  # type: ignore[arg-type]
                return current  # type: ignore[return-value]
            if call_method_name(current) in _ELEMENTWISE and isinstance(current.func, cst.Attribute):  # type: ignore[attr-defined]
                current = current.func.value  # type: ignore[attr-defined]
                continue
            return None
        if kind is cst.BinaryOperation:
            left, right = current.left, current.right  # type: ignore[attr-defined]
            if _a_number(right):
                current = left
            elif _a_number(left):
                current = right
            else:
                return None
            continue
        if kind is cst.UnaryOperation:
            current = current.expression  # type: ignore[attr-defined]
            continue
        if kind is cst.Name and depth > 0:
            binding = analysis.binding_in_effect(current, current.value)  # type: ignore[attr-defined]
            if type(binding) is cst.SimpleStatementLine and len(binding.body) == 1 and type(binding.body[0]) is cst.Assign:  # type: ignore[attr-defined]
                return batch_axis_reduced(analysis, binding.body[0].value, depth - 1)  # type: ignore[attr-defined]
            if type(binding) is cst.Assign:
                return batch_axis_reduced(analysis, binding.value, depth - 1)  # type: ignore[attr-defined]
        return None
    return None


def _a_number(expr: cst.BaseExpression) -> bool:
    """A literal number (``2``, ``0.5``, ``-1``) or a setting of the model (``self.num_experts``): no batch axis."""
    if isinstance(expr, cst.UnaryOperation):
        expr = expr.expression
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        return True
    return isinstance(expr, (cst.Integer, cst.Float))


#: Functions and methods whose value is no linear function of their argument.
NONLINEAR = frozenset(
    {
        "pow", "sqrt", "rsqrt", "log", "log1p", "exp", "square", "reciprocal", "softmax", "log_softmax", "relu",
        "sigmoid", "tanh", "abs", "norm", "normalize", "var", "std", "logsumexp", "kl_div", "entropy",
    }
)


def used_nonlinearly(analysis: ScriptAnalysis, reduction: cst.BaseExpression, nonlinear: bool = False, depth: int = 2) -> bool:
    """Whether the value of a reduction over axis 0 enters a non-linear function (``(m ** 2)``, ``torch.log(m)``,
    ``m * other``, ``(x - m).pow(2)``, ``x / m``; ``nonlinear``: the reduction is one already, ``std(0)``) on its
    way to a scalar term: a full reduction (``.sum()``, ``.mean()``) or a loss function (no linear function itself),
    in its statement or, bound whole to a name (``usage = g.mean(0)``), in a statement after it in its function
    that reads the name.
    A mean of a share of the batch is a share of the batch's mean, so a linear use gives DDP's averaged
    gradients the original's value; a non-linear one does not. A value that goes on as a tensor (a sequence-first
    model's ``h.mean(0)`` pooling over positions into a head) is no term of the loss here."""
    child: cst.CSTNode = reduction
    for ancestor in analysis.ancestors(reduction):
        kind = type(ancestor)
        if kind is cst.BinaryOperation:
            operator = type(ancestor.operator)  # type: ignore[attr-defined]
            other = ancestor.right if child is ancestor.left else ancestor.left  # type: ignore[attr-defined]
            if operator is cst.Power or operator is cst.MatrixMultiply or (operator is cst.Divide and child is ancestor.right):  # type: ignore[attr-defined]
                nonlinear = True
            elif operator in (cst.Multiply, cst.Divide) and not _a_number(other):
                nonlinear = True
        elif kind is cst.Call:
            name = call_method_name(ancestor)  # type: ignore[arg-type]
            if name in NONLINEAR:
                nonlinear = True  # ``torch.log(m)``, ``m.pow(2)``, ``(x - m).abs()``
            if _a_loss(analysis, ancestor):  # type: ignore[arg-type]
                return True  # ``F.mse_loss(m, target)``, ``F.cross_entropy(head(x - m), y)``: a loss is no linear function
            if _a_full_reduction(analysis, ancestor):  # type: ignore[arg-type]
                return nonlinear
        elif kind is cst.Assign and child is ancestor.value and depth > 0:  # type: ignore[attr-defined]
            targets = [t.target for t in ancestor.targets]  # type: ignore[attr-defined]
            if len(targets) != 1 or type(targets[0]) is not cst.Name:
                return False
            return _name_used_nonlinearly(analysis, ancestor, targets[0].value, nonlinear, depth - 1)  # type: ignore[attr-defined, arg-type]
        elif isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement)):
            return False
        child = ancestor
    return False


def _a_full_reduction(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """``t.sum()``, ``t.mean()``, ``torch.sum(t)``: a reduction over every axis, a loss term of what it takes."""
    name = call_method_name(call)
    if name not in ("sum", "mean"):
        return False
    skip = 1 if f"torch.{name}" in analysis.qualified_names(call.func) else 0
    return not any(a.keyword is None and not a.star for a in call.args[skip:]) and not any(
        a.keyword is not None and a.keyword.value in ("dim", "axis") for a in call.args
    )


def _a_loss(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """A loss function of ``torch.nn.functional`` (``F.mse_loss``, ``F.cross_entropy``)."""
    return any(q.startswith("torch.nn.functional.") and (q.endswith("_loss") or q.endswith("cross_entropy")) for q in analysis.qualified_names(call.func))


def _name_used_nonlinearly(analysis: ScriptAnalysis, assign: cst.Assign, name: str, nonlinear: bool, depth: int) -> bool:
    """Whether a read of ``name`` after the assignment, in its function, uses the value non-linearly on its way
    to a loss term (:func:`used_nonlinearly`)."""
    function = analysis.enclosing_function(assign)
    if function is None:
        return False
    for node in analysis.nodes_below(function.body):
        if type(node) is not cst.Name or node.value != name or not analysis.comes_before(assign, node):  # type: ignore[attr-defined]
            continue
        if analysis.binding_in_effect(node, name) not in (assign, analysis.parent(assign)):
            continue
        if used_nonlinearly(analysis, node, nonlinear, depth):  # type: ignore[arg-type]
            return True
    return False
