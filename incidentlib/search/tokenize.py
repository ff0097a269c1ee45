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
from collections.abc import Callable, Iterable, Sequence
from itertools import chain

import numpy as np

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
# One scan reports each match as one string, told apart by its first character: a Latin word (with the Hangul
# run glued to it), a free Hangul run, or a punctuation mark and the Hangul run glued to it (the mark is consumed
# with the run, which is safe because no word starts with one).  A text without Hangul takes the Latin-only
# pattern, a plain character-class scan.
_LATIN = r"[A-Za-z0-9_]+(?:[.\-/][A-Za-z0-9_]+)*"
_WORD = rf"{_LATIN}[\uac00-\ud7a3]*|[^\s\uac00-\ud7a3A-Za-z0-9_]?[\uac00-\ud7a3]+"
_WORDS = re.compile(_WORD)
_LATIN_WORDS = re.compile(_LATIN)
# A match of _WORDS starting with a Latin character: the word, then the Hangul run glued to it.
_LATIN_HEAD = re.compile(rf"({_LATIN})(.*)", re.DOTALL)
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
# Xid 79, SXid 12, HTTP 503.  The quantifiers are possessive: giving a letter, a space or a digit back could never
# let the rest match (a letter is not a space, a space not a digit, a digit fails the look-ahead), and not trying
# is a quarter of this scan's time.
_CODE = r"[A-Za-z]{2,}+"
_NUMBER = r"\d{1,4}+(?![0-9A-Za-z_])"
_CODE_NUMBER = re.compile(rf"\b({_CODE})\s++({_NUMBER})")
# The two halves of a match of _CODE_NUMBER, which white space separates: the end of one white-space-free piece
# of text and the start of the next (see token_ids).
_CODE_AT_END = re.compile(rf"\b({_CODE})\Z")
_NUMBER_AT_START = re.compile(rf"({_NUMBER})")
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
        # the kernel writes "NVRM: Xid (PCI:0000:3b:00): 79" (older drivers "(0000:3b:00)"): the bracket goes with the
        # address, so "Xid 79" is left
        ("pci", r"(?:\((?:pci:)?)?(?:\b(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\b|\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\b)(?:\):)?",
         (), r":[0-9a-f]{2}[.:]"),
        ("ip", r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{2,5})?\b", (), r"\.\d{1,3}\."),
        ("host", r"\bip-\d+-\d+-\d+-\d+(?:\.[a-z0-9-]+)*|\b[a-z0-9-]*(?:node|host|worker|compute|server)[a-z0-9-]*-\d+(?:\.[a-z0-9-]+)*",
         ("ip-", "node", "host", "worker", "compute", "server"), r"ip-\d|(?:node|host|worker|compute|server)[a-z0-9-]*-\d"),
        ("hex", r"\b0x[0-9a-f]{5,}\b", ("0x",), None),
        ("pid", r"\b(?:pid|tid)\s*[=: ]\s*\d+", ("pid", "tid"), None),
        ("rank", r"\brank\s*[=: ]?\s*\d+", ("rank",), None),
        ("seq", r"\bseq(?:num)?\s*[=: ]\s*\d+", ("seq",), None),
        # measured counts and durations (600351 ms) vary from run to run; configured limits are
        # round numbers people write (Timeout(ms)=600000), so those stay literal
        ("num", r"\b\d{5,}\b(?<!000)", (), r"\d{5}"),
    )
)
#: The placeholder tokens of volatile log values (``<num>``, ``<pid>``, …): they say a text is a log line, not what it
#: is about.
VOLATILE_TOKENS = frozenset(f"<{name}>" for name, _, _, _ in _VOLATILE)
# Error families: one feature token for a family however its instance is written; with the
# substrings (lowercase) one of which every match contains and a hint every match passes, tested on the lowercased
# text as for ``_VOLATILE``.
_FAMILIES: tuple[tuple[str, re.Pattern[str], tuple[str, ...], re.Pattern[str] | None], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE), needles, re.compile(hint) if hint else None)
    for name, pattern, needles, hint in (
        ("nccl_watchdog", r"watchdog caught collective operation timeout|nccl watchdog|processgroupnccl.*watchdog", ("watchdog",), None),
        ("ib_completion_error", r"\bibv_wc_\w+|transport retry counter exceeded|work completion.*status|completion error",
         ("ibv_wc_", "transport retry counter exceeded", "completion"), None),
        ("http_5xx", r"\b(?:http(?:/[\d.]+)?|status(?: code)?)[\s:=]+5\d\d\b|\b5\d\d (?:internal server error|bad gateway|service unavailable|gateway timeout)",
         ("http", "status", "internal server error", "bad gateway", "service unavailable", "gateway timeout"), r"5\d\d"),
        ("http_4xx", r"\b(?:http(?:/[\d.]+)?|status(?: code)?)[\s:=]+4\d\d\b|\b4\d\d (?:forbidden|not found|unauthorized|too many requests)",
         ("http", "status", "forbidden", "not found", "unauthorized", "too many requests"), r"4\d\d"),
        # the event as Kubernetes writes it and as people write it ("a crash loop", "image pull backoff")
        ("k8s_backoff", r"\b(?:crashloopbackoff|imagepullbackoff|errimagepull|back-off restarting|crash[\s-]?loop(?:s|ing)?\b|"
                        r"image[\s-]?pull[\s-]?back[\s-]?off)",
         ("crash", "imagepullbackoff", "errimagepull", "back-off restarting", "image"), None),
        # the kernel's and Kubernetes' words for it, and people's ("OOM killed", "the OOM killer")
        ("oom_kill", r"\boomkilled\b|out of memory: kill(?:ed)? process|\boom[\s-]?kill(?:ed|er|s)?\b",
         ("oomkilled", "out of memory: kill", "oom-kill", "oom kill", "oomkill"), None),
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


def _match_tokens(match: str) -> tuple[str, ...]:
    """The tokens of one match of ``_WORDS`` (see ``_WORD``: the first character tells its kind)."""
    first = match[0]
    if "\uac00" <= first <= "\ud7a3":
        return _word_tokens(match)
    head = _LATIN_HEAD.fullmatch(match)
    if head is None:  # a mark and the Hangul run glued to it
        return _glued_tokens(match[1:])
    latin, glued = head.groups()
    return _word_tokens(latin) + _glued_tokens(glued) if glued else _word_tokens(latin)


class _Memo(dict[str, tuple[str, ...]]):
    """Tokens by match, computed on the first look-up (so a known match costs one C-level look-up)."""

    def __missing__(self, match: str) -> tuple[str, ...]:
        if len(self) >= WORD_MEMO_SIZE:
            self.clear()
        found = self[match] = _match_tokens(match)
        return found


_word_memo = _Memo()


def _lowered(text: str) -> str | None:
    """The text the gates test: ``text`` lowercased, or ``None`` (every gate passes) when ``str.lower`` does not
    fold it as the patterns' case-insensitive matching does."""
    return None if any(c in text for c in _FOLD_EXCEPTIONS) else text.lower()


def _may_match(lowered: str | None, needles: tuple[str, ...], hint: re.Pattern[str] | None = None) -> bool:
    """Whether a pattern's gate passes (see ``_VOLATILE``); always when case folding is not ``str.lower``'s."""
    if lowered is None:
        return True
    return (not needles or any(needle in lowered for needle in needles)) and (hint is None or hint.search(lowered) is not None)


def _family_token(name: str) -> str:
    return f"<{name}>"


def _code_token(code: str, number: str) -> str:
    return f"{code.lower()}{number}"


def _link_token(left: str, op: str, right: str) -> str:
    return f"{left.lower()}{op}{right.lower()}"


def _may_link(text: str) -> bool:
    return "<" in text or ">" in text  # every match of _LINK_WIDTH holds one


def tokenize(text: str, *, gates: bool = True) -> list[str]:
    """Tokens for indexing and querying (the same function is used for both).

    In order: the error-family tokens (``_FAMILIES``, once each), a placeholder for each volatile log token
    (``_VOLATILE``, pattern by pattern, each pattern on the text the previous ones left), the words' tokens
    (``_WORDS``), the code-number tokens (``Xid 79`` -> ``xid79``) and the link-width tokens (``x4<x16``).
    :func:`token_ids` gives the same tokens for many texts at once (numbered; the build's path).

    Cost: a pattern whose gate fails (see ``_VOLATILE``, ``_CODE_NUMBER_HINT``; a text without Hangul
    takes ``_LATIN_WORDS``) is not run, and a word's tokens are computed once per process
    (``WORD_MEMO_SIZE``), so a text costs a few scans in C and a C-level dictionary look-up per word.  ``gates=False`` runs every pattern: the same tokens, slower
    (the reference the gates are tested against).
    """
    text = unicodedata.normalize("NFKC", text)
    lowered = _lowered(text) if gates else None
    tokens: list[str] = []
    for name, pattern, needles, hint in _FAMILIES:
        if _may_match(lowered, needles, hint) and pattern.search(text):
            tokens.append(_family_token(name))
    for name, pattern, needles, hint in _VOLATILE:
        if _may_match(lowered, needles, hint):
            text, count = pattern.subn(" ", text)
            tokens.extend([_family_token(name)] * count)
    matches: list[str] = _WORDS.findall(text) if not gates or _HANGUL.search(text) else _LATIN_WORDS.findall(text)
    tokens.extend(chain.from_iterable(map(_word_memo.__getitem__, matches)))
    if not gates or _CODE_NUMBER_HINT.search(text):
        tokens.extend(_code_token(code, number) for code, number in _CODE_NUMBER.findall(text))
    if not gates or _may_link(text):
        tokens.extend(_link_token(*found) for found in _LINK_WIDTH.findall(text))
    return tokens


# ---------------------------------------------------------------------------------------------------------------
# Many texts at once: the same rules and patterns, with the per-text Python work moved into one split of a
# batch's joined texts and into tables kept per distinct piece of text.
#
# A piece is a run of text between white space (``str.split``, whose white space is the ``\s`` of the patterns,
# tests/test_tokenize.py).  No match of ``_WORDS`` holds white space, and a Hangul run at the start of a piece
# follows white space (free, as at the start of a text), so a text's words are its pieces' words in order, and
# a piece's word tokens are computed once however often it occurs.  The gates are tested on pieces first: a
# needle is in a text only if its longest space-free part is in one of its (lowercased) pieces, and a hint
# (``_VOLATILE``: no hint matches white space) matches a text only inside one of its pieces; only the texts
# whose pieces pass run the exact gate (``_may_match``) and the pattern, on their own, as :func:`tokenize` does.
# A ``_CODE_NUMBER`` match is the end of one piece and the start of the next, read from the piece tables.  A
# text that a ``_VOLATILE`` pattern changed is scanned again on its own, as :func:`tokenize` scans it.

#: Joins a batch's texts: ``\x00`` between white space is a piece of its own, which marks where a text ends.
#: A text holding ``\x00`` is tokenized on its own (:func:`tokenize`).
_TEXT_END = "\x00"
_SEPARATOR = f"\n{_TEXT_END}\n"
#: Texts joined and split at a time by :func:`token_ids`: the pieces of one batch are held at once (about
#: 80 strings a text, ~70 MB at this size), while a batch's fixed costs (a join, a split, a few array
#: operations) stay negligible.
TOKEN_BATCH = 16384
#: Distinct pieces whose tables are kept between batches (the bound of ``WORD_MEMO_SIZE``, for the same reason);
#: the tables start again at a batch boundary when more are held.
PIECE_MEMO_SIZE = WORD_MEMO_SIZE
# (needles, hint) of each gated pattern, families then volatile tokens: bit j of a piece's gate bits says that
# its needles may be in it, bit 32 + j that its hint may match in it; bit 31 that it holds a < or > (_LINK_WIDTH).
_GATES = [(needles, hint) for _, _, needles, hint in (*_FAMILIES, *_VOLATILE)]
_HINT_BIT = 32
_LINK_BIT = 31
# Each needle's longest space-free part, and each distinct hint, with the bits of the gates that hold it; a gate
# without needles (or without a hint) has its bit set in every piece.
_PART_BITS: dict[str, int] = {}
_HINT_BITS: dict[re.Pattern[str], int] = {}
_ALWAYS = 0
for _j, (_needles, _hint) in enumerate(_GATES):
    for _needle in _needles:
        _part = max(_needle.split(" "), key=len)
        _PART_BITS[_part] = _PART_BITS.get(_part, 0) | 1 << _j
    if _hint is None:
        _ALWAYS |= 1 << (_HINT_BIT + _j)
    else:
        _HINT_BITS[_hint] = _HINT_BITS.get(_hint, 0) | 1 << (_HINT_BIT + _j)
    if not _needles:
        _ALWAYS |= 1 << _j
_EVERY_GATE = (1 << (_HINT_BIT + len(_GATES))) - 1
# Matches somewhere in a piece exactly when one of the parts or hints does: most pieces hold none, and one
# search rules them all out.
_ANY_GATE = re.compile("|".join([*map(re.escape, _PART_BITS), *(hint.pattern for hint in _HINT_BITS)]))


def _piece_bits(piece: str) -> int:
    """Gate bits of one piece (see ``_GATES``)."""
    lowered = _lowered(piece)
    if lowered is None:
        return _EVERY_GATE
    bits = _ALWAYS | (1 << _LINK_BIT if "<" in piece or ">" in piece else 0)
    if _ANY_GATE.search(lowered) is None:
        return bits
    for part, part_bits in _PART_BITS.items():
        if part in lowered:
            bits |= part_bits
    for hint, hint_bits in _HINT_BITS.items():
        if hint.search(lowered):
            bits |= hint_bits
    return bits


class _Pieces(dict[str, int]):
    """Distinct pieces, numbered on first look-up, with a table per number: the piece's word-token ids (ragged:
    ``offsets``/``flat``), its gate bits, the ``_CODE`` ending it and the ``_NUMBER`` starting it."""

    def __init__(self, term_id: Callable[[str], int]) -> None:
        super().__init__()
        self.term_id = term_id
        self.reset()

    def reset(self) -> None:
        self.clear()
        self.flat: list[int] = []
        self.offsets: list[int] = [0]
        self.bits: list[int] = []
        self.tails: list[str | None] = []
        self.heads: list[str | None] = []
        self.has_tail: list[bool] = []
        self.has_head: list[bool] = []
        self[_TEXT_END] = self._add([], 0, None, None)

    def _add(self, ids: list[int], bits: int, tail: str | None, head: str | None) -> int:
        self.flat.extend(ids)
        self.offsets.append(len(self.flat))
        self.bits.append(bits)
        self.tails.append(tail)
        self.heads.append(head)
        self.has_tail.append(tail is not None)
        self.has_head.append(head is not None)
        return len(self.bits) - 1

    def __missing__(self, piece: str) -> int:
        tokens = chain.from_iterable(map(_word_memo.__getitem__, _WORDS.findall(piece)))
        tail, head = _CODE_AT_END.search(piece), _NUMBER_AT_START.match(piece)
        number = self[piece] = self._add(list(map(self.term_id, tokens)), _piece_bits(piece),
                                         tail.group(1) if tail else None, head.group(1) if head else None)
        return number


def token_ids(texts: Sequence[str], term_id: Callable[[str], int]) -> tuple[np.ndarray, np.ndarray]:
    """The tokens of every text, as :func:`tokenize` gives them, numbered by ``term_id``: one int32 array of all
    the texts' tokens in order, and the number of tokens of each text.

    A batch of texts is joined and split once into white-space-free pieces; each distinct piece's word tokens,
    gate bits and code-number halves are computed once and kept in tables (see the comment above
    ``_TEXT_END``), and the batch's tokens are gathered from the tables with array operations, so the Python
    work per text is a dictionary look-up per piece and a few list operations.  ``term_id`` is called in an
    order of its own (not the order of the tokens), and may be called for a term no text ends up holding.
    """
    ids, lengths = token_id_batches(texts, term_id)
    return (np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)), lengths


def token_id_batches(texts: Sequence[str], term_id: Callable[[str], int]) -> tuple[list[np.ndarray], np.ndarray]:
    """:func:`token_ids` with the token ids left in one array per batch of :data:`TOKEN_BATCH` texts, for a caller
    that copies them into place itself (a large build: one copy of every id less)."""
    return token_id_stream((texts[start:start + TOKEN_BATCH] for start in range(0, len(texts), TOKEN_BATCH)), term_id)


def token_id_stream(batches: Iterable[Sequence[str]], term_id: Callable[[str], int]
                    ) -> tuple[list[np.ndarray], np.ndarray]:
    """:func:`token_id_batches` of texts that come a batch at a time (any size, best :data:`TOKEN_BATCH`): one id
    array per batch, and every text's token count.  A batch is dropped once tokenized, so a reader of texts as they
    arrive (a tokenizing worker) never holds them all."""
    pieces = _Pieces(term_id)
    ids: list[np.ndarray] = []
    lengths: list[np.ndarray] = [np.zeros(0, dtype=np.int32)]
    for batch in batches:
        if len(pieces) > PIECE_MEMO_SIZE:
            pieces.reset()
        found, counts = _batch_ids(list(batch), term_id, pieces)
        ids.append(found)
        lengths.append(counts)
    return ids, np.concatenate(lengths)


def _batch_ids(texts: list[str], term_id: Callable[[str], int], table: _Pieces) -> tuple[np.ndarray, np.ndarray]:
    size = len(texts)
    texts = list(map(_nfkc, texts))
    # the tokens a text has before its words (families, placeholders; all of a text tokenized on its own, or the
    # words of a changed text) and after them (code numbers, link widths), by text
    before: dict[int, list[str]] = {}
    after: dict[int, list[str]] = {}
    if _TEXT_END in "".join(texts):
        for i, text in enumerate(texts):
            if _TEXT_END in text:
                before[i] = tokenize(text)
                texts[i] = ""
    numbers = np.fromiter(map(table.__getitem__, (_SEPARATOR.join(texts) + _SEPARATOR).split()), dtype=np.int64)
    ends = np.flatnonzero(numbers == 0)  # the separator is piece 0; one per text, in order
    if len(ends) != size:
        raise AssertionError(f"{len(ends)} text ends found in a batch of {size} texts")
    starts = np.concatenate([[0], ends[:-1] + 1])
    text_bits = np.bitwise_or.reduceat(np.asarray(table.bits, dtype=np.uint64)[numbers], starts)
    lowered: dict[int, str | None] = {}
    changed: set[int] = set()
    for j, (needles, hint) in enumerate(_GATES):
        both = np.uint64((1 << j) | (1 << (_HINT_BIT + j)))
        for i in np.flatnonzero((text_bits & both) == both).tolist():
            text = texts[i]
            if i not in lowered:
                lowered[i] = _lowered(text)
            if not _may_match(lowered[i], needles, hint):
                continue
            if j < len(_FAMILIES):
                name, pattern, _, _ = _FAMILIES[j]
                if pattern.search(text):
                    before.setdefault(i, []).append(_family_token(name))
            else:
                name, pattern, _, _ = _VOLATILE[j - len(_FAMILIES)]
                texts[i], count = pattern.subn(" ", text)
                if count:
                    before.setdefault(i, []).extend([_family_token(name)] * count)
                    changed.add(i)
    offsets = np.asarray(table.offsets, dtype=np.int64)
    counts: np.ndarray = (offsets[1:] - offsets[:-1])[numbers]  # word tokens of each piece
    for i in sorted(changed):  # scanned again as tokenize() scans it; its pieces' tokens are left out
        text = texts[i]
        before[i].extend(chain.from_iterable(map(_word_memo.__getitem__, _WORDS.findall(text))))
        after[i] = [_code_token(code, number) for code, number in _CODE_NUMBER.findall(text)]
        counts[starts[i]:ends[i]] = 0
    pairs = np.flatnonzero(np.asarray(table.has_tail)[numbers[:-1]] & np.asarray(table.has_head)[numbers[1:]])
    if len(pairs):
        owners = np.searchsorted(ends, pairs)
        for at, i in zip(pairs.tolist(), owners.tolist(), strict=True):
            if i not in changed:
                tail, head = table.tails[int(numbers[at])], table.heads[int(numbers[at + 1])]
                if tail is not None and head is not None:  # both are, by the flags
                    after.setdefault(i, []).append(_code_token(tail, head))
    link = np.uint64(1 << _LINK_BIT)
    for i in np.flatnonzero(text_bits & link).tolist():
        found = _LINK_WIDTH.findall(texts[i])
        if found:
            after.setdefault(i, []).extend(_link_token(*match) for match in found)
    # gather the pieces' word-token ids: piece k's tokens are flat[offsets[n_k] : offsets[n_k] + counts[k]]
    total = int(counts.sum())
    firsts = offsets[numbers]
    shift = np.repeat(firsts - (np.cumsum(counts) - counts), counts)
    words = np.asarray(table.flat, dtype=np.int32)[shift + np.arange(total, dtype=np.int64)]
    word_counts = np.add.reduceat(counts, starts).astype(np.int32)
    if before or after:
        # each text's own tokens go at the start (before) or the end (after) of its words; np.insert keeps the
        # given order among equal positions, so a text's before-tokens stay ahead of its after-tokens
        word_ends = np.cumsum(word_counts, dtype=np.int64)
        places: list[int] = []
        extra: list[str] = []
        for i in sorted(before.keys() | after.keys()):
            for side, at in ((before, int(word_ends[i] - word_counts[i])), (after, int(word_ends[i]))):
                tokens = side.get(i)
                if tokens:
                    places.extend([at] * len(tokens))
                    extra.extend(tokens)
                    word_counts[i] += len(tokens)
        words = np.insert(words, places, np.fromiter(map(term_id, extra), dtype=np.int32, count=len(extra)))
    return words, word_counts


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def tokenize_many(texts: Sequence[str]) -> list[list[str]]:
    """``[tokenize(t) for t in texts]`` through :func:`token_ids` (the bulk path, as strings)."""
    terms: dict[str, int] = {}
    ids, lengths = token_ids(texts, lambda term: terms.setdefault(term, len(terms)))
    names = np.array(list(terms) or [""], dtype=object)[ids]
    bounds = np.cumsum(lengths)[:-1].tolist() if len(lengths) else []
    return [part.tolist() for part in np.split(names, bounds)] if len(texts) else []
