"""Lines the migration wrote, wrapped to the project's line length the way black (and ``ruff format``) would.

Only lines the migration produced are touched: a line of the output that is not a line of the original
file, a whole statement on one physical line, longer than the limit, without a comment. The user's own
lines, long or not, stay as they are. The wrapping follows black's right-hand split:

- the last bracket pair with something in it is opened: ``head(`` / the contents, one indent deeper /
  ``)tail``;
- contents still too long are split at their commas, one element per line with a trailing comma, and an
  element still too long is split the same way;
- the value of an assignment or ``return`` that has operators outside brackets (``a if c else b``) is put in
  parentheses first (black's invisible parentheses);
- what cannot be split (a long string) stays long.

The limit is ``line-length`` from the nearest ``pyproject.toml`` (``[tool.ruff]``, then ``[tool.black]``),
``ruff.toml`` or ``.ruff.toml``, else 88 (black's and ruff's default).
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ddp_migrate.codemods.analysis.lines import split_lines

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python < 3.11
    import tomli as tomllib

#: black's and ruff's default line length.
DEFAULT_LINE_LENGTH = 88
INDENT = "    "
OPENING, CLOSING = "([{", ")]}"
#: Keywords that make an expression more than one atom (black then wraps it in parentheses).
OPERATOR_WORDS = frozenset({"if", "else", "and", "or", "not", "in", "is", "lambda", "for", "await"})
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def line_length_for(path: str) -> int:
    """The line length of the project a file belongs to (see the module's docstring)."""
    folder = Path(path).resolve().parent if path not in ("", "-") else Path.cwd()
    return _line_length_in(folder)


@lru_cache(maxsize=256)
def _line_length_in(folder: Path) -> int:
    for candidate in (folder, *folder.parents):
        for name, tables in (("ruff.toml", ((),)), (".ruff.toml", ((),)), ("pyproject.toml", (("tool", "ruff"), ("tool", "black")))):
            config = candidate / name
            if not config.is_file():
                continue
            try:
                data = tomllib.loads(config.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                continue
            for table in tables:
                section = data
                for key in table:
                    section = section.get(key, {}) if isinstance(section, dict) else {}
                value = section.get("line-length") if isinstance(section, dict) else None
                if isinstance(value, int) and value > 0:
                    return value
    return DEFAULT_LINE_LENGTH


@dataclass
class Wrapped:
    """The wrapped text and, for each line of the text before (1-based), its first and last line after."""

    text: str
    lines: list[tuple[int, int]]

    def start(self, line: int) -> int:
        """Where a line of the text before starts now."""
        return self.lines[line - 1][0] if 0 < line <= len(self.lines) else line

    def end(self, line: int) -> int:
        """Where a line of the text before ends now."""
        return self.lines[line - 1][1] if 0 < line <= len(self.lines) else line


def wrap_new_lines(original: str, text: str, limit: int) -> Wrapped:
    """``text`` (the migrated file) with the long lines the migration wrote wrapped (see the module's
    docstring); ``text`` itself when nothing needs wrapping or the wrapped text would not parse.

    A statement the user laid out over several lines keeps that layout unless one of its lines is new and
    too long; then the whole statement is laid out again, as black would.
    """
    lines = split_lines(text, keepends=True)
    identity = Wrapped(text, [(n, n) for n in range(1, len(lines) + 1)])
    old = set(split_lines(original))
    candidates = {
        number
        for number, line in enumerate(lines, 1)
        if len(line.rstrip("\r\n")) > limit and line.rstrip("\r\n") not in old
    }
    if not candidates:
        return identity
    spans = {first: (last, joined) for first, last, joined in _statements(text, lines, candidates)}
    if not spans:
        return identity
    out: list[str] = []
    mapping: list[tuple[int, int]] = []
    number = 1
    while number <= len(lines):
        last, joined = spans.get(number, (number, None))
        replacement = _wrap(joined, limit) if joined is not None else None
        if replacement is None:
            replacement = lines[number - 1 : last]
        first = len(out) + 1
        out.extend(replacement)
        mapping.extend([(first, len(out))] * (last - number + 1))
        number = last + 1
    new_text = "".join(out)
    try:
        ast.parse(new_text)
    except (SyntaxError, ValueError):
        return identity
    return Wrapped(new_text, mapping)


def _statements(text: str, lines: list[str], candidates: set[int]) -> list[tuple[int, int, str]]:
    """Each logical line without a comment that holds one of the ``candidates`` lines: its first and last
    physical line (1-based) and the statement on one line (its indentation kept; the breaks inside brackets
    or after a backslash joined)."""
    found: list[tuple[int, int, str]] = []
    tokens: list[tokenize.TokenInfo] = []
    commented = False
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
                continue
            if token.type == tokenize.COMMENT:
                commented = commented or bool(tokens)  # a comment line of its own is not the statement's
                continue
            if token.type == tokenize.NEWLINE:
                first, last = (tokens[0].start[0], tokens[-1].end[0]) if tokens else (0, -1)
                if not commented and any(first <= number <= last for number in candidates):
                    found.append((first, last, _joined(tokens, lines)))
                tokens, commented = [], False
                continue
            tokens.append(token)
    except (tokenize.TokenError, SyntaxError):
        return []
    return found


def _joined(tokens: list[tokenize.TokenInfo], lines: list[str]) -> str:
    """The tokens of one logical line as one physical line, with its line ending; a token that spans
    lines (a triple-quoted string) is kept as written."""
    first = tokens[0]
    line = lines[first.start[0] - 1]
    parts = [line[: first.start[1]]]
    previous: tokenize.TokenInfo | None = None
    for token in tokens:
        if previous is not None:
            if token.start[0] == previous.end[0]:
                parts.append(lines[token.start[0] - 1][previous.end[1] : token.start[1]])
            elif not (previous.string in OPENING or token.string in CLOSING):
                parts.append(" ")
        parts.append(token.string)
        previous = token
    ending = line[len(line.rstrip("\r\n")) :] or "\n"
    return "".join(parts) + ending


@dataclass(frozen=True)
class _Token:
    type: int
    string: str
    start: int
    end: int


def _tokens(code: str) -> list[_Token] | None:
    """The tokens of one line of code (columns into ``code``), an f-string as one token; ``None`` when the
    line does not tokenize on its own."""
    found: list[_Token] = []
    fstring_depth, fstring_start = 0, 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
                continue
            if token.start[0] != 1:
                return None
            if _FSTRING_START is not None and token.type == _FSTRING_START:
                if fstring_depth == 0:
                    fstring_start = token.start[1]
                fstring_depth += 1
                continue
            if fstring_depth:
                if token.type == _FSTRING_END:
                    fstring_depth -= 1
                    if fstring_depth == 0:
                        found.append(_Token(tokenize.STRING, code[fstring_start : token.end[1]], fstring_start, token.end[1]))
                continue
            found.append(_Token(token.type, token.string, token.start[1], token.end[1]))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return found


def _pairs(tokens: list[_Token]) -> list[tuple[int, int]] | None:
    """The bracket pairs at depth 0, as token indexes (opening, closing); ``None`` when unbalanced."""
    pairs: list[tuple[int, int]] = []
    stack: list[int] = []
    for index, token in enumerate(tokens):
        if token.type != tokenize.OP:
            continue
        if token.string in OPENING:
            stack.append(index)
        elif token.string in CLOSING:
            if not stack:
                return None
            opening = stack.pop()
            if not stack:
                pairs.append((opening, index))
    return None if stack else pairs


def _wrap(line: str, limit: int) -> list[str] | None:
    """One physical line split as black would (``None`` when it cannot be split)."""
    ending = line[len(line.rstrip("\r\n")) :] or "\n"
    body = line.rstrip("\r\n")
    content = body.lstrip(" \t")
    indent = body[: len(body) - len(content)]
    split = _split(content, indent, limit, statement=True)
    if len(split) == 1:
        return None
    return [part + ending for part in split]


def _split(content: str, indent: str, limit: int, statement: bool = False) -> list[str]:
    """``indent + content`` as lines no longer than ``limit`` where brackets allow it."""
    if len(indent) + len(content) <= limit:
        return [indent + content]
    tokens = _tokens(content)
    pairs = _pairs(tokens) if tokens else None
    if not tokens or pairs is None:
        return [indent + content]
    inside = {index for opening, closing in pairs for index in range(opening, closing + 1)}
    if not statement:
        strings = _concatenated_strings(tokens)
        if strings is not None:
            return [indent + part for part in strings]
        parts = _delimiter_split(content, tokens, inside)
        if parts is not None:
            if len(parts) == 1:
                return [indent + content]
            return [line for part in parts for line in _split(part, indent, limit)]
    head_end, tail_start = _value_in_parentheses(tokens, inside) if statement else (None, None)
    if head_end is not None and tail_start is not None:
        head, inner, tail = content[:head_end].rstrip() + " (", content[head_end:tail_start].strip(), ")" + content[tail_start:]
    else:
        pair = next((p for p in reversed(pairs) if p[1] > p[0] + 1), None)
        if pair is None:
            return [indent + content]
        opening, closing = tokens[pair[0]], tokens[pair[1]]
        head, inner, tail = content[: opening.end], content[opening.end : closing.start].strip(), content[closing.start :]
    deeper = indent + INDENT
    elements = _elements(inner)
    if elements is None:
        return [indent + content]
    magic_comma = inner.endswith(",")
    if not magic_comma and len(deeper) + len(inner) <= limit:
        return [indent + head, deeper + inner, indent + tail]
    lines = [indent + head]
    if len(elements) == 1 and not magic_comma:
        lines.extend(_split(inner, deeper, limit))
    else:
        for element in elements:
            lines.extend(_split(element + ",", deeper, limit))
    lines.append(indent + tail)
    return lines


def _concatenated_strings(tokens: list[_Token]) -> list[str] | None:
    """The parts of an implicitly concatenated string (``f"a " f"b"``, maybe with a trailing comma), one per
    line as black lays them out; ``None`` for any other expression."""
    comma = bool(tokens) and tokens[-1].type == tokenize.OP and tokens[-1].string == ","
    strings = tokens[:-1] if comma else tokens
    if len(strings) < 2 or any(t.type != tokenize.STRING for t in strings):
        return None
    parts = [t.string for t in strings]
    if comma:
        parts[-1] += ","
    return parts


def _value_in_parentheses(tokens: list[_Token], inside: set[int]) -> tuple[int | None, int | None]:
    """Where the value of ``target = value`` or ``return value`` starts and ends when black would wrap
    it in parentheses: it has operators outside brackets (``inside``: the indexes of tokens within a bracket
    pair) and is not one bracketed atom already."""
    start: int | None
    if tokens[0].type == tokenize.NAME and tokens[0].string == "return" and len(tokens) > 1:
        start = 1
    else:
        start = next(
            (i + 1 for i, t in enumerate(tokens) if i not in inside and t.type == tokenize.OP and t.string == "="),
            None,
        )
    if start is None or start >= len(tokens):
        return None, None
    value = range(start, len(tokens))
    operators = [
        i
        for i in value
        if i not in inside
        and (
            (tokens[i].type == tokenize.OP and tokens[i].string not in ".")
            or (tokens[i].type == tokenize.NAME and tokens[i].string in OPERATOR_WORDS)
        )
    ]
    if not operators:
        return None, None
    if any(tokens[i].string in ("=", ",", ":", ";") or tokens[i].string.endswith("=") and tokens[i].string not in ("==", "<=", ">=", "!=") for i in operators):
        return None, None  # a chained assignment, a tuple, an annotation: left to the bracket split
    return tokens[start].start, tokens[-1].end


#: black's delimiter priorities, highest first, for an expression inside brackets.
DELIMITERS = (frozenset({"if", "else"}), frozenset({"or"}), frozenset({"and"}))


def _delimiter_split(content: str, tokens: list[_Token], inside: set[int]) -> list[str] | None:
    """An expression inside brackets split before its highest-priority operator at depth 0 (a comprehension's
    ``for`` and filtering ``if``, then ``if``/``else``, ``or``, ``and``), each part on a line of its own;
    ``[content]`` when it must stay whole (a lambda); ``None`` when it has no such operator (the bracket split
    applies)."""
    words = [(i, t.string) for i, t in enumerate(tokens) if i not in inside and t.type == tokenize.NAME]
    if any(word == "lambda" for _, word in words):
        return [content]
    fors = [i - 1 if i > 0 and tokens[i - 1].string == "async" else i for i, word in words if word == "for"]
    if fors:
        # A comprehension: black cuts before each ``for`` and each ``if`` that filters (the highest priority).
        cuts = [i for i in fors if i > 0] + [i for i, word in words if word == "if" and i > fors[0]]
        if not cuts:
            return None  # (``for k, v in state.items()``, a clause already on its own line: the bracket split applies)
        bounds = [0, *(tokens[i].start for i in sorted(cuts)), len(content)]
        return [content[a:b].strip() for a, b in zip(bounds, bounds[1:])]
    for delimiters in DELIMITERS:
        cuts = [i for i, word in words if word in delimiters and i > 0]
        if cuts:
            bounds = [0, *(tokens[i].start for i in cuts), len(content)]
            return [content[a:b].strip() for a, b in zip(bounds, bounds[1:])]
    return None


def _elements(inner: str) -> list[str] | None:
    """The comma-separated elements at depth 0 of a bracket's contents (``None`` when it does not tokenize)."""
    if not inner:
        return []
    tokens = _tokens(inner)
    if tokens is None:
        return None
    elements: list[str] = []
    depth, start = 0, 0
    for token in tokens:
        if depth == 0 and token.type == tokenize.NAME and token.string in ("lambda", "for"):
            return [inner.rstrip(",").strip()] if not inner.rstrip().endswith(",") else None
        if token.type != tokenize.OP:
            continue
        if token.string in OPENING:
            depth += 1
        elif token.string in CLOSING:
            depth -= 1
        elif token.string == "," and depth == 0:
            elements.append(inner[start : token.start].strip())
            start = token.end
    rest = inner[start:].strip()
    if rest:
        elements.append(rest)
    return elements
