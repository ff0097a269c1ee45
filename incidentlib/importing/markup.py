"""HTML in an export's text fields, read as the text a reader of the page sees (and Jira's wiki markup:
:mod:`.jira_markup`).

Ticket systems and status pages export their descriptions as HTML (``<p>…</p>``, ``<br/>``, ``&amp;``).  Stored as
it is, the markup is shown to people as tags, and it is searched and embedded as words: every record of such an
export shares ``div``, ``class`` and ``span``, which pulls all of them together and away from everything else.

A text is read as HTML only when it holds markup no plain text does: a closing tag of an HTML element, or a line
break tag (``</p>``, ``</li>``, ``<br>``).  A log line's ``<pid>``, a type's ``List<String>`` or a comparison
``a < b`` is not HTML, and inside a text that is, a tag that names no HTML element is kept as it was written.
Blocks become paragraphs, a line break or a list item a line; ``<pre>`` keeps its lines and spaces; scripts,
styles and comments are dropped; character references are read (``&amp;`` is ``&``).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from .jira_markup import jira_text, looks_like_jira

#: Elements that start and end a paragraph of the text.
BLOCKS = frozenset({"p", "div", "section", "article", "header", "footer", "main", "aside", "nav", "blockquote",
                    "ul", "ol", "dl", "table", "thead", "tbody", "tfoot", "h1", "h2", "h3", "h4", "h5", "h6",
                    "pre", "figure", "hr", "details", "summary", "form", "fieldset", "address"})
#: Elements that are a line of their own (a list item, a table row, a definition).
LINES = frozenset({"li", "tr", "dt", "dd", "caption"})
#: Elements whose content no reader sees.
HIDDEN = frozenset({"script", "style", "head", "title", "template", "noscript", "svg"})
#: Elements read as the words inside them, nothing added.
INLINE = frozenset({"a", "abbr", "b", "big", "cite", "code", "del", "em", "font", "i", "img", "ins", "kbd", "label",
                    "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "time", "tt", "u",
                    "var", "button", "body", "html", "center", "wbr", "br", "meta", "link", "use"})
#: Table cells: apart by a space, so that a row reads as its words.
CELLS = frozenset({"td", "th"})
ELEMENTS = BLOCKS | LINES | HIDDEN | INLINE | CELLS
#: Markup that only HTML has: the closing tag of a known element, or a line break.  An opening tag alone is not
#: enough: ``<pid>`` and ``<none>`` open nothing, and neither does a ``<b>`` typed in a chat message.
_CLOSABLE = "|".join(sorted(ELEMENTS - {"br"}))
_HTML_EVIDENCE = re.compile(rf"</(?:{_CLOSABLE})\s*>|<br\s*/?>", re.IGNORECASE)


def looks_like_html(text: str) -> bool:
    """Whether ``text`` holds markup no plain text holds (a known element's closing tag, or ``<br>``)."""
    return "<" in text and _HTML_EVIDENCE.search(text) is not None


class _TextOfPage(HTMLParser):
    """Collects the text of a page as its reader sees it (module docstring)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0  # depth inside elements whose content is not shown
        self._pre = 0  # depth inside <pre>: lines and spaces kept

    def _break(self, text: str) -> None:
        if not self._hidden:
            self.parts.append(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in HIDDEN:
            self._hidden += 1
        elif tag == "pre":
            self._pre += 1
            self._break("\n\n")
        elif tag in BLOCKS:
            self._break("\n\n")
        elif tag in LINES or tag == "br":
            self._break("\n")
        elif tag in CELLS:
            self._break(" ")
        elif tag not in ELEMENTS:
            self.handle_data(self.get_starttag_text() or "")  # <pid> in a log line quoted in the page

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in BLOCKS:
            self._break("\n\n")
        elif tag in LINES or tag == "br":
            self._break("\n")
        elif tag not in ELEMENTS:
            self.handle_data(self.get_starttag_text() or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
            self._break("\n\n")
        elif tag in BLOCKS:
            self._break("\n\n")
        elif tag not in ELEMENTS:  # a line's end is the next line's start, or its block's end
            self.handle_data(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self._hidden:
            return
        # outside <pre> a line break of the source is a space, as a browser shows it
        self.parts.append(data if self._pre else re.sub(r"\s+", " ", data))


def _page_parts(text: str) -> list[str]:
    parser = _TextOfPage()
    parser.feed(text)
    parser.close()
    return parser.parts


def html_text(text: str) -> str:
    """The text a reader of the HTML ``text`` sees: paragraphs apart by a blank line, runs of spaces one space but in
    ``<pre>`` (whose line breaks are kept), no line starting or ending with a space."""
    try:
        parts = _page_parts(text)
    except AssertionError:  # a malformed marked section ("<![x …"), which the standard parser gives up on
        parts = _page_parts(text.replace("<![", "&lt;!["))
    lines = [line.strip() for line in "".join(parts).replace("\xa0", " ").splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def as_text(value: str) -> str:
    """``value`` read as text: :func:`html_text` when it :func:`looks_like_html`, Jira's wiki markup read
    (:func:`.jira_markup.jira_text`) when it holds some, else unchanged."""
    if looks_like_html(value):
        return html_text(value)
    return jira_text(value) if looks_like_jira(value) else value
