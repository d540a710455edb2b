"""The codec's one error type."""

from __future__ import annotations


class CodecError(ValueError):
    """A value could not be decoded (or encoded).

    `field` names the annotation or field, `text` is the offending text, `position` the
    character offset of that text in the whole input (None where it has no single place).
    `str(err)` is HAMi's own message where HAMi has one.
    """

    def __init__(self, message: str, *, field: str, text: str, position: int | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.text = text
        self.position = position
