"""The errors a page tells apart by type, not by their text. Each is a ValueError (or TypeError),
so code that catches those keeps working."""

from __future__ import annotations


class EmptyInput(ValueError):
    """A text (a sentence, a prompt, a list of them) with nothing to trace in it."""
