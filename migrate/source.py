"""Reading a Python file's bytes into text and back, keeping its encoding and newline style exactly."""

from __future__ import annotations

import codecs
import io
import tokenize
from dataclasses import dataclass


class SourceError(Exception):
    """The file cannot be read as Python source (bad encoding cookie, undecodable bytes)."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class DecodedSource:
    """A file's text with what is needed to write it back byte for byte."""

    text: str
    encoding: str  # as Python names it; "utf-8-sig" when the file starts with a BOM

    def encode(self, text: str) -> bytes:
        """Encode new text the way the original was encoded (the BOM comes back with ``utf-8-sig``).

        Raises :class:`SourceError` when the new text holds a character the file's encoding cannot
        represent (a fix that wrote non-ASCII text into a latin-1 file), so the file is left alone.
        """
        try:
            return text.encode(self.encoding)
        except UnicodeEncodeError as error:
            line = text.count("\n", 0, error.start) + 1
            column = error.start - (text.rfind("\n", 0, error.start) + 1) + 1
            raise SourceError(
                f"cannot encode the migrated text as {self.encoding}: {text[error.start]!r} is not representable; "
                "file left unchanged",
                line,
                column,
            ) from None


def decode(data: bytes) -> DecodedSource:
    """Decode source bytes per PEP 263 (BOM or coding cookie, else UTF-8) without touching newlines."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        raise SourceError(f"cannot decode: {error}") from None
    try:
        codecs.lookup(encoding)
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise SourceError(f"cannot decode as {encoding}: invalid byte {data[error.start:error.start + 1]!r}", line, column) from None
    except LookupError:
        raise SourceError(f"cannot decode: unknown encoding {encoding!r}") from None
    if encoding == "utf-8-sig" and text.startswith("\ufeff"):
        text = text[1:]
    return DecodedSource(text, encoding)


def newline_style(text: str) -> str:
    """The newline the file uses first (``\\r\\n`` or ``\\n``), for reports and tests."""
    index = text.find("\n")
    return "\r\n" if index > 0 and text[index - 1] == "\r" else "\n"
