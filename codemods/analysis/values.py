"""Values of simple expressions, where the analysis can tell them: the literal a call site passes for a
parameter (or its default), and what a test built of names, ``not``, ``and`` / ``or`` and comparisons
evaluates to once some names are bound. Anything else is :data:`UNKNOWN`."""

from __future__ import annotations

import libcst as cst

from .script import ScriptAnalysis, all_parameters, dotted_name

#: A value the analysis cannot tell.
UNKNOWN = object()
#: A value that is neither ``None`` nor false: an object a call site passes (``optimizer=opt``).
SOME_OBJECT = object()


def value_at(caller: ScriptAnalysis, call: cst.Call, function: cst.FunctionDef, name: str) -> object:
    """What a parameter holds when ``call`` runs the function: a literal (``True``, ``None``, ``"val"``, a
    number) passed or defaulted, :data:`SOME_OBJECT` for another expression passed where the default is
    ``None`` (an optimizer handed in), :data:`UNKNOWN` otherwise."""
    passed = caller.argument_for(call, function, name)
    param = next((p for p in all_parameters(function) if p.name.value == name), None)
    if passed is None:
        if param is None or param.default is None or any(arg.star for arg in call.args):
            return UNKNOWN  # (``**kwargs`` at the call site may set it)
        return literal_value(param.default)
    value = literal_value(passed)
    if value is UNKNOWN and param is not None and isinstance(param.default, cst.Name) and param.default.value == "None":
        return SOME_OBJECT
    return value


def literal_value(expr: cst.BaseExpression) -> object:
    """The value of a literal expression (``True``, ``None``, ``"train"``, ``3``), or :data:`UNKNOWN`."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value
    if isinstance(expr, cst.Integer):
        return int(expr.value, 0)
    if isinstance(expr, cst.Float):
        return float(expr.value)
    return UNKNOWN


def flip(value: object) -> object:
    """``not value`` for a known truth value; :data:`UNKNOWN` stays unknown."""
    return value if value is UNKNOWN else not value


def truth(test: cst.BaseExpression, bindings: dict[str, object]) -> object:
    """A test's value once the parameters hold ``bindings``: ``True``, ``False`` or :data:`UNKNOWN` (names,
    ``not``, ``and``/``or``, comparisons with ``==``, ``!=``, ``is``, ``is not``, ``in``, ``not in``)."""
    value = evaluate(test, bindings)
    if value is UNKNOWN:
        return UNKNOWN
    if value is SOME_OBJECT:
        return True
    return bool(value)


def evaluate(expr: cst.BaseExpression, bindings: dict[str, object]) -> object:
    """An expression's value once the names (or dotted names: ``self.use_aux``) in ``bindings`` hold theirs:
    a literal, a tuple of them, a truth value, or :data:`UNKNOWN`."""
    if isinstance(expr, (cst.Name, cst.Attribute)):
        name = dotted_name(expr)
        if name in bindings:
            return bindings[name]
    literal = literal_value(expr)
    if literal is not UNKNOWN:
        return literal
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return flip(truth(expr.expression, bindings))
    if isinstance(expr, cst.BooleanOperation):
        left, right = truth(expr.left, bindings), truth(expr.right, bindings)
        if isinstance(expr.operator, cst.And):
            return False if False in (left, right) else (UNKNOWN if UNKNOWN in (left, right) else True)
        return True if True in (left, right) else (UNKNOWN if UNKNOWN in (left, right) else False)
    if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        items = [evaluate(e.value, bindings) for e in expr.elements]  # type: ignore[union-attr]
        return UNKNOWN if any(i is UNKNOWN or i is SOME_OBJECT for i in items) else tuple(items)
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        left = evaluate(expr.left, bindings)
        target = expr.comparisons[0]
        right = evaluate(target.comparator, bindings)
        operator = type(target.operator)
        if left is SOME_OBJECT and right is None and operator in (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual):
            return operator in (cst.IsNot, cst.NotEqual)
        if left is UNKNOWN or right is UNKNOWN or left is SOME_OBJECT or right is SOME_OBJECT:
            return UNKNOWN
        if operator in (cst.Equal, cst.Is):
            return left == right
        if operator in (cst.NotEqual, cst.IsNot):
            return left != right
        if operator in _ORDERINGS and _number(left) and _number(right):
            return _ORDERINGS[operator](left, right)
        if operator in (cst.In, cst.NotIn) and isinstance(right, (tuple, str)):
            inside = left in right if not isinstance(right, str) or isinstance(left, str) else False
            return inside if operator is cst.In else not inside
    return UNKNOWN


def _number(value: object) -> bool:
    return type(value) in (int, float)


#: The comparisons :func:`evaluate` reads between two numbers.
_ORDERINGS = {
    cst.LessThan: lambda a, b: a < b,
    cst.LessThanEqual: lambda a, b: a <= b,
    cst.GreaterThan: lambda a, b: a > b,
    cst.GreaterThanEqual: lambda a, b: a >= b,
}
