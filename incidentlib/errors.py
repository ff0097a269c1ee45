"""Errors shared across the library, the CLI, the HTTP API and MCP."""

from __future__ import annotations


class NotFound(KeyError):
    """A lookup that found nothing; the message names what was asked for and close matches."""

    def __init__(self, key: str, message: str, suggestions: list[str] | None = None):
        self.key = key
        self.suggestions = suggestions or []
        hint = f" (did you mean {', '.join(self.suggestions)}?)" if self.suggestions else ""
        super().__init__(message + hint)

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])
