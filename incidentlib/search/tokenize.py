"""A bilingual tokenizer for BM25 that keeps error strings intact.

Korean glues particles and endings to the word (타임아웃이, 타임아웃으로), so a
Hangul word is reduced to its stem by stripping the longest known particle or
ending; the stem's character bigrams are added too, so compounds and spelling
variants still meet (장애조치 / 장애 조치).

Error text is kept whole where it matters: ``_ALLGATHER_BASE`` stays one token
(and also yields ``allgather`` and ``base``); ``Xid 79`` also yields ``xid79``;
``x4 < x16`` also yields ``x4<x16``; numbers such as ``403`` are tokens.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import chain

# Longest first, so 으로 wins over 로 and 에서 over 에.
_PARTICLES = sorted(
    {
        "이", "가", "은", "는", "을", "를", "의", "에", "에서", "에게", "께", "한테", "로", "으로", "와", "과",
        "도", "만", "까지", "부터", "보다", "처럼", "마다", "이나", "나", "이며", "며", "이고", "고", "랑", "이랑",
        "으로써", "로써", "으로서", "로서", "에는", "에서는", "으로는", "로는", "에도", "에서도", "이라", "라",
        "이다", "였다", "이었다", "했다", "됐다", "되었다", "한다", "된다", "하는", "되는", "해서", "돼서",
        "하고", "되고", "했고", "됐고", "하며", "하면", "되면", "하여", "되어", "돼", "해", "한", "된", "할", "될",
        "들", "들이", "들을", "들의", "들은", "들에", "적", "적인", "적으로",
    },
    key=len,
    reverse=True,
)
# Syllables a Korean word keeps after a particle is stripped.  Most Korean nouns in the vocabulary
# have two or more syllables, so "장애가" -> "장애", while a two-syllable word whose last syllable
# looks like a particle ("회의", meeting; 의 is a particle) is left whole instead of cut to one syllable.
_MIN_STEM = 2
# A particle glued to a Latin word or number ("GPU를", "Meta의", "79가") is a Hangul run of its own
# after the split; it carries no meaning, so it is dropped rather than indexed as a one-letter token.
_PARTICLE_SET = frozenset(_PARTICLES)

# A word is a Hangul run or a Latin/number run (with inner . - /).  A Hangul run glued to what precedes it
# (neither space nor Hangul: "GPU를", "(장애)를") is told apart, so that a lone particle there can be dropped.
# One scan reports each match as (Latin word, Hangul run glued to it, Hangul run glued to a punctuation mark,
# free Hangul run): the mark that precedes a glued run is consumed with it, which is safe because no word
# starts with one.  A text without Hangul takes the Latin-only pattern, a plain character-class scan.
_LATIN = r"[A-Za-z0-9_]+(?:[.\-/][A-Za-z0-9_]+)*"
_WORDS = re.compile(rf"({_LATIN})([\uac00-\ud7a3]*)|([\uac00-\ud7a3]+)|[^\s\uac00-\ud7a3A-Za-z0-9_]([\uac00-\ud7a3]+)")
_LATIN_WORDS = re.compile(_LATIN)
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
_CODE_NUMBER = re.compile(r"\b([A-Za-z]{2,})\s+(\d{1,4})(?![0-9A-Za-z_])")  # Xid 79, SXid 12, HTTP 503
# every match of _CODE_NUMBER holds a letter, white space and a digit in a row: a text without one skips its slower scan
_CODE_NUMBER_HINT = re.compile(r"[A-Za-z]\s+\d")
_LINK_WIDTH = re.compile(r"\b(x\d{1,2})\s*([<>]=?)\s*(x\d{1,2})\b", re.IGNORECASE)  # x4 < x16

# Volatile tokens of pasted logs: a line from another machine differs in every one of them, so
# each becomes a typed placeholder (on the index and the query side alike) and the *shape* of
# the message is what matches.  The stored text keeps the literal for display.
# Each pattern comes with a gate that every match passes, tested on the lowercased text: one of
# the substrings is in it, and the hint (a short pattern that a scan finds quickly) matches in it;
# a text that fails the gate skips the pattern's slower scan.  The gate is tested on the text
# before any placeholder is put in: a placeholder is a space, which no substring or hint holds,
# so putting one in never makes a gate pass that failed before.  ``()`` / ``None``: no test.
_VOLATILE: tuple[tuple[str, re.Pattern[str], tuple[str, ...], re.Pattern[str] | None], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE), needles, re.compile(hint) if hint else None)
    for name, pattern, needles, hint in (
        ("uuid", r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", (), r"-[0-9a-f]{4}-[0-9a-f]{4}-"),
        ("time", r"\b\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:z|[+-]\d{2}:?\d{2})?|\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b", (), r":\d\d:"),
        ("uptime", r"\[\s*\d+\.\d{3,}\]", ("[",), None),  # dmesg seconds since boot
        ("pci", r"\b(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\b|\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\b", (), r":[0-9a-f]{2}[.:]"),
        ("ip", r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{2,5})?\b", (), r"\.\d{1,3}\."),
        ("host", r"\bip-\d+-\d+-\d+-\d+(?:\.[a-z0-9-]+)*|\b[a-z0-9-]*(?:node|host|worker|compute|server)[a-z0-9-]*-\d+(?:\.[a-z0-9-]+)*",
         ("ip-", "node", "host", "worker", "compute", "server"), r"-\d"),
        ("hex", r"\b0x[0-9a-f]{5,}\b", ("0x",), None),
        ("pid", r"\b(?:pid|tid)\s*[=: ]\s*\d+", ("pid", "tid"), None),
        ("rank", r"\brank\s*[=: ]?\s*\d+", ("rank",), None),
        ("seq", r"\bseq(?:num)?\s*[=: ]\s*\d+", ("seq",), None),
        # measured counts and durations (600351 ms) vary from run to run; configured limits are
        # round numbers people write (Timeout(ms)=600000), so those stay literal
        ("num", r"\b\d{5,}\b(?<!000)", (), r"\d{5}"),
    )
)
# Error families: one feature token for a family however its instance is written; with the
# substrings (lowercase) one of which every match contains, tested on the lowercased text as for ``_VOLATILE``.
_FAMILIES: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE), needles)
    for name, pattern, needles in (
        ("nccl_watchdog", r"watchdog caught collective operation timeout|nccl watchdog|processgroupnccl.*watchdog", ("watchdog",)),
        ("ib_completion_error", r"\bibv_wc_\w+|transport retry counter exceeded|work completion.*status|completion error",
         ("ibv_wc_", "transport retry counter exceeded", "completion")),
        ("http_5xx", r"\b(?:http(?:/[\d.]+)?|status(?: code)?)[\s:=]+5\d\d\b|\b5\d\d (?:internal server error|bad gateway|service unavailable|gateway timeout)",
         ("http", "status", "internal server error", "bad gateway", "service unavailable", "gateway timeout")),
        ("http_4xx", r"\b(?:http(?:/[\d.]+)?|status(?: code)?)[\s:=]+4\d\d\b|\b4\d\d (?:forbidden|not found|unauthorized|too many requests)",
         ("http", "status", "forbidden", "not found", "unauthorized", "too many requests")),
        ("k8s_backoff", r"\b(?:crashloopbackoff|imagepullbackoff|errimagepull|back-off restarting)",
         ("crashloopbackoff", "imagepullbackoff", "errimagepull", "back-off restarting")),
        ("oom_kill", r"\boomkilled\b|out of memory: kill(?:ed)? process|oom-kill", ("oomkilled", "out of memory: kill", "oom-kill")),
    )
)
# Case-insensitive matching equates the dotless ı and the dotted İ with i, which ``str.lower`` does not
# (NFKC has already turned the Kelvin sign and the long s into K and s): a text holding one scans every
# pattern instead of testing substrings first.
_FOLD_EXCEPTIONS = ("\u0131", "\u0130")

_STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have", "in", "into", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were", "with", "which", "when", "what", "how", "why", "did", "do", "does", "we", "our", "their", "they", "than", "then", "there", "these", "those", "after", "before", "over", "under", "about"]
)


# Particle lengths, longest first: a word has one suffix of each length, so a set lookup per length
# finds the longest particle without trying every particle in turn.
_PARTICLE_LENGTHS = sorted({len(p) for p in _PARTICLES}, reverse=True)


def _strip_particle(word: str) -> str:
    for length in _PARTICLE_LENGTHS:
        if len(word) - length >= _MIN_STEM and word[-length:] in _PARTICLE_SET:
            return word[:-length]
    return word


def _english(word: str) -> str:
    # a light plural rule only: "timeouts" -> "timeout", but "class", "bus", "status" stay
    if len(word) > 4 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


#: Distinct words whose tokens are remembered: enough for the vocabulary of a large archive, and a bound on the
#: memory (each entry is a word and a few short strings); the memo starts again when full.
WORD_MEMO_SIZE = 200_000
_SEPARATORS = re.compile(r"[_.\-/]+")


def _word_tokens(raw: str) -> tuple[str, ...]:
    """The tokens of one word of ``_WORDS`` (a particle glued to a Latin word is dropped by the caller)."""
    if "\uac00" <= raw[0] <= "\ud7a3":  # a Hangul run: a word never mixes scripts
        stem = _strip_particle(raw)
        if len(stem) > 2:
            return (stem, *(stem[i : i + 2] for i in range(len(stem) - 1)))
        return (stem,)
    word = raw.lower()
    if word in _STOPWORDS:
        return ()
    tokens = [_english(word)]
    if not word.isalnum():  # holds one of _ . - /
        pieces = [p for p in _SEPARATORS.split(word) if p]
        if len(pieces) > 1:
            tokens.extend(_english(p) for p in pieces if p not in _STOPWORDS)
    return tuple(tokens)


def _glued_tokens(run: str) -> tuple[str, ...]:
    # a lone particle glued to a Latin word or a mark carries no meaning (see _PARTICLE_SET)
    return () if run in _PARTICLE_SET else _word_tokens(run)


def _match_tokens(match: str | tuple[str, str, str, str]) -> tuple[str, ...]:
    """The tokens of one match of ``_LATIN_WORDS`` (a word) or of ``_WORDS`` (a tuple of its four groups)."""
    if isinstance(match, str):
        return _word_tokens(match)
    latin, glued_to_word, free, glued_to_mark = match
    if latin:
        return _word_tokens(latin) + _glued_tokens(glued_to_word) if glued_to_word else _word_tokens(latin)
    return _word_tokens(free) if free else _glued_tokens(glued_to_mark)


class _Memo(dict[str | tuple[str, str, str, str], tuple[str, ...]]):
    """Tokens by match, computed on the first look-up (so a known match costs one C-level look-up)."""

    def __missing__(self, match: str | tuple[str, str, str, str]) -> tuple[str, ...]:
        if len(self) >= WORD_MEMO_SIZE:
            self.clear()
        found = self[match] = _match_tokens(match)
        return found


_word_memo = _Memo()


def _may_match(lowered: str | None, needles: tuple[str, ...], hint: re.Pattern[str] | None = None) -> bool:
    """Whether a pattern's gate passes (see ``_VOLATILE``); always when case folding is not ``str.lower``'s."""
    if lowered is None:
        return True
    return (not needles or any(needle in lowered for needle in needles)) and (hint is None or hint.search(lowered) is not None)


def tokenize(text: str, *, gates: bool = True) -> list[str]:
    """Tokens for indexing and querying (the same function is used for both).

    Cost: a pattern whose gate fails (see ``_VOLATILE``, ``_CODE_NUMBER_HINT``; a text without Hangul
    takes ``_LATIN_WORDS``) is not run, and a word's tokens are computed once per process
    (``WORD_MEMO_SIZE``), so a text costs a few scans in C and a C-level dictionary look-up per word.  ``gates=False`` runs every pattern: the same tokens, slower
    (the reference the gates are tested against).
    """
    text = unicodedata.normalize("NFKC", text)
    lowered = None if not gates or any(c in text for c in _FOLD_EXCEPTIONS) else text.lower()
    tokens: list[str] = []
    for name, pattern, needles in _FAMILIES:
        if _may_match(lowered, needles) and pattern.search(text):
            tokens.append(f"<{name}>")
    for name, pattern, needles, hint in _VOLATILE:
        if _may_match(lowered, needles, hint):
            text, count = pattern.subn(" ", text)
            tokens.extend([f"<{name}>"] * count)
    matches: list[str] | list[tuple[str, str, str, str]] = (
        _WORDS.findall(text) if not gates or _HANGUL.search(text) else _LATIN_WORDS.findall(text))
    tokens.extend(chain.from_iterable(map(_word_memo.__getitem__, matches)))
    if not gates or _CODE_NUMBER_HINT.search(text):
        for code, number in _CODE_NUMBER.findall(text):
            tokens.append(f"{code.lower()}{number}")
    if not gates or "<" in text or ">" in text:  # every match of _LINK_WIDTH holds one
        for left, op, right in _LINK_WIDTH.findall(text):
            tokens.append(f"{left.lower()}{op}{right.lower()}")
    return tokens
