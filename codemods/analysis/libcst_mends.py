"""Mends for libcst bugs that valid Python trips over, applied once when the analysis is imported.

Each mend first probes for its bug and changes nothing on a libcst that does not have it, so a fixed
release is used as it is.
"""

from __future__ import annotations

import libcst as cst

try:
    from libcst._nodes.expression import ExpressionPosition
except ImportError:  # a libcst that moved its internals: nothing here applies to it
    ExpressionPosition = None  # type: ignore[assignment,misc]


def _lambda_next_to_word_operator_fails() -> bool:
    """Whether libcst cannot check a parenthesised lambda written right after a keyword (``return(lambda:
    0)``, ``a or(lambda: b)``): ``Lambda._safe_to_use_with_word_operator`` calls ``super()`` without
    arguments in a class libcst rebuilds with ``__slots__``, which raises ``TypeError`` (LibCST issue #1061).
    Every node built around such a lambda (a parse, a fix, ``node.children``, ``deep_clone``) then fails."""
    parenthesised = cst.Lambda(
        params=cst.Parameters(), body=cst.Integer("0"), lpar=[cst.LeftParen()], rpar=[cst.RightParen()]
    )
    try:
        parenthesised._safe_to_use_with_word_operator(ExpressionPosition.RIGHT)
    except TypeError:
        return True
    return False


def _lambda_safe_to_use_with_word_operator(self: cst.Lambda, position: ExpressionPosition) -> bool:
    """libcst's own ``Lambda._safe_to_use_with_word_operator`` with the base class named explicitly."""
    if position == ExpressionPosition.LEFT:
        return len(self.rpar) > 0 or self.body._safe_to_use_with_word_operator(position)
    return cst.BaseExpression._safe_to_use_with_word_operator(self, position)


def mend_libcst() -> None:
    """Apply every mend whose bug this libcst has (idempotent)."""
    if ExpressionPosition is not None and _lambda_next_to_word_operator_fails():
        cst.Lambda._safe_to_use_with_word_operator = _lambda_safe_to_use_with_word_operator  # type: ignore[method-assign]


mend_libcst()
