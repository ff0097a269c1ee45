"""Jira's wiki markup in an export's text fields, read as the text a reader of the issue sees.

Jira's CSV and JSON exports give a description as its wiki markup: ``h2. Impact``, ``{code:java}…{code}``,
``{noformat}``, ``{color:red}…{color}``, ``[the runbook|https://…]``, ``||node||Xid||``.  Stored as it is, the markup
is shown as such, and its words (``code``, ``noformat``, ``color``, ``red``, ``h2``) are searched and embedded as if
the incident said them, in every record of the export alike.

A text is read as Jira markup only when it holds what no plain text or Markdown does: a macro (``{code}``,
``{noformat}``, ``{quote}``, ``{panel…}``, ``{color…}``), a heading line (``h1.`` to ``h6.``), a link with a label
(``[text|https://…]``) or a table heading row (``||a||b||``).  What a macro holds is kept (a log in ``{code}`` is
evidence); the macro's tags go.  A heading is Markdown's (``## Impact``), a labelled link its label, a table row its cells,
``{{mono}}`` and ``*strong*`` their words, an image (``!graph.png|thumbnail!``) nothing, and a numbered item
(``# step``, which Markdown would read as a heading) a list item.
"""

from __future__ import annotations

import re

#: Macros that open or close a block: their tags become paragraph breaks.
_BLOCK_MACRO = re.compile(r"\{(?:code|noformat|quote|panel)(?::[^}\n]*)?\}", re.IGNORECASE)
#: Macros that only colour what they hold.
_INLINE_MACRO = re.compile(r"\{color(?::[^}\n]*)?\}", re.IGNORECASE)
_HEADING = re.compile(r"^[ \t]*h([1-6])\.[ \t]+", re.MULTILINE)
_QUOTE_LINE = re.compile(r"^[ \t]*bq\.[ \t]+", re.MULTILINE)
_LABELLED_LINK = re.compile(r"\[([^\[\]|\n]+)\|(?:https?://|mailto:|file:|#)[^\]\n]*\]", re.IGNORECASE)
_BARE_LINK = re.compile(r"\[((?:https?://|mailto:)[^\]|\s]+)\]", re.IGNORECASE)
_USER_OR_ATTACHMENT = re.compile(r"\[[~^]([^\]\n]+)\]")
_IMAGE = re.compile(r"!(?=[^!\s])[^!\n|]*\.(?:png|jpe?g|gif|svg|bmp|webp)(?:\|[^!\n]*)?!", re.IGNORECASE)
_MONOSPACE = re.compile(r"\{\{(.+?)\}\}")
_STRONG = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_TABLE_ROW = re.compile(r"^[ \t]*\|\|?(.*?)\|?\|?[ \t]*$")
_NUMBERED = re.compile(r"^[ \t]*#+[ \t]+", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*\*+[ \t]+", re.MULTILINE)
_RULE = re.compile(r"^[ \t]*-{4,}[ \t]*$", re.MULTILINE)
#: What only Jira markup holds (module docstring).
_EVIDENCE = re.compile(r"\{(?:code|noformat|quote|panel|color)(?::[^}\n]*)?\}|^[ \t]*h[1-6]\.[ \t]+\S"
                       r"|\[[^\[\]|\n]+\|https?://[^\]\n]*\]|^[ \t]*\|\|[^|\n]+\|\|", re.IGNORECASE | re.MULTILINE)
#: What a heading line holds, lowercased: a text without a brace, a bar or one of these holds no Jira markup.
_HEADING_MARKERS = tuple(f"h{level}." for level in range(1, 7))


def looks_like_jira(text: str) -> bool:
    """Whether ``text`` holds markup only Jira's wiki notation has (module docstring)."""
    if "{" not in text and "|" not in text:
        # only a heading line is left to look for: its "hN." is found by plain substring tests, a scan in C each,
        # before the pattern that tries a line start at every position (an import asks this of every text field)
        lowered = text.lower()
        if not any(marker in lowered for marker in _HEADING_MARKERS):
            return False
    return _EVIDENCE.search(text) is not None


def _table_line(line: str) -> str:
    if not line.lstrip().startswith("|"):
        return line
    row = _TABLE_ROW.match(line)
    cells = [cell.strip() for cell in re.split(r"\|\|?", row.group(1))] if row else []
    return " ".join(cell for cell in cells if cell)


def jira_text(text: str) -> str:
    """The text a reader of the Jira-marked-up ``text`` sees: paragraphs apart by a blank line (module docstring)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\\\\", "\n")
    text = _BULLET.sub("- ", _NUMBERED.sub("- ", text))  # before the headings become Markdown's "## "
    text = _BLOCK_MACRO.sub("\n\n", text)
    text = _INLINE_MACRO.sub("", text)
    text = _RULE.sub("\n", text)
    # a heading is still one (the importer's titles and summaries skip headings): Markdown's, opening a paragraph
    text = _HEADING.sub(lambda heading: "\n" + "#" * int(heading.group(1)) + " ", text)
    text = _QUOTE_LINE.sub("", text)
    text = _IMAGE.sub("", text)
    text = _LABELLED_LINK.sub(r"\1", text)
    text = _BARE_LINK.sub(r"\1", text)
    text = _USER_OR_ATTACHMENT.sub(r"\1", text)
    text = _MONOSPACE.sub(r"\1", text)
    text = _STRONG.sub(r"\1", text)
    lines = [_table_line(line).rstrip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
