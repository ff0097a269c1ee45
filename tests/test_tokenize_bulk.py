"""The bulk tokenizer (``token_ids``, the BM25 build's path) gives what ``tokenize`` gives text by text.

Both are made from the same patterns and word rules in ``tokenize.py``; the bulk path joins a batch of texts,
splits it into white-space-free pieces and keeps tables per distinct piece.  These tests compare the two on
texts built to hit every rule (glued particles, log tokens, error families, code numbers, link widths, case
folding exceptions, NFKC, the separator character itself) and on the bundled library and eval queries, and
check that the postings built from texts equal those built from per-text token lists.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

import incidentlib.search.tokenize as tk
from incidentlib import Library
from incidentlib.search.chunks import incident_chunks
from incidentlib.search.lexical import Postings, build_postings, postings_from_tokens, update_postings
from incidentlib.search.tokenize import tokenize, tokenize_many

REPO = Path(__file__).resolve().parent.parent

# Pieces of Korean, English and log text that exercise every rule, and characters that could break the joined
# scan: the separator (\x00), other white space, case-folding exceptions (ı, İ, K), NFKC forms, combining marks.
PIECES = [
    "장애", "가", "를", "이", "의", "회의", "으로", "타임아웃", "타임아웃이", "학습", "했다", "GPU", "x4", "x16", "<", ">", ">=",
    "Xid", "79", "a.b", "a.", "-", "/", "_", "(", ")", "'", "é", "e\u0301", "中", " ", "  ", "\n", "\t", "\x1f", "\u3000",
    "\u00a0", "를.", "Meta", "0x1f", "0x7f3a9c00d000", "HTTP/1.1", "503", "Service Unavailable", "status code: 404",
    "Not Found", "watchdog", "NCCL", "ProcessGroupNCCL", "Watchdog", "ibv_wc_retry_exc_err", "completion", "status",
    "CrashLoopBackOff", "OOMKilled", "oom-kill", "out of memory: kill", "pid=4412", "TID: 77", "rank 12", "Rank", "seq=881",
    "SeqNum", "600351", "600000", "12:34:56.789", "2024-03-01T12:00:01Z", "[ 1234.567890]", "0000:3b:00.0", "3b:00.0",
    "192.168.0.10:8443", "10.0.0.1", "ip-10-0-3-7.ec2.internal", "gpu-node-17", "worker-3", "host", "server-12",
    "123e4567-e89b-12d3-a456-426614174000", "\u0131", "\u0130", "\u212a", "\u017f", "ＧＰＵ", "①", "٣", "\x00", "\x00\n",
    "timeouts", "the", "class", "_ALLGATHER_BASE", "ΑΣ", "ß", "ﬁ", "ㄱ", "각", "\ud7a3", "\uac00", ".", ",", ":", "=", "#3",
    "in 2023", "x4 < x16", "internal server error", "back-off restarting",
]


def random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    glue = ["", " ", "", " ", "\n", "-", ":"]
    return ["".join(rng.choice(PIECES) + rng.choice(glue) for _ in range(rng.randint(0, 14))) for _ in range(count)]


EDGE_CASES = ["", " ", "\x00", "\n\x00\n", "a\x00b 장애가", "İP 10.0.0.1 pıd 9", "타임아웃이\x00\n를", "Xid\n79", "Xid 79\x00",
              "foo[ 1.234]7", "ab 12.cd 34", "a_Xid 79", "장애Xid 79", "12345٣ Xid 1234٣", "x4<x16", "HTTP 503 Service Unavailable",
              "NVRM: Xid (PCI:0000:c3:00): 79, pid=1", "Xid (pci:0000:3b:00.0):\n48", "(PCI:0000:3b:00)"]


def _same(texts: list[str]) -> None:
    bulk = tokenize_many(texts)
    assert len(bulk) == len(texts)
    for text, found in zip(texts, bulk, strict=True):
        assert found == tokenize(text), repr(text[:200])


def test_bulk_tokens_equal_per_text_tokens_on_edge_cases_and_random_texts() -> None:
    texts = [*EDGE_CASES, *random_texts(3000, seed=5)]
    _same(texts)
    tokens = [t for found in tokenize_many(texts) for t in found]
    # the generated texts do reach the rules: placeholders, families, code numbers, link widths, glued particles
    assert {"<ip>", "<uuid>", "<nccl_watchdog>", "<http_5xx>", "xid79", "x4<x16", "타임아웃"} <= set(tokens)


def test_bulk_tokens_across_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    # small batches and a small piece memo: tables are reset between batches, texts end at batch edges
    monkeypatch.setattr(tk, "TOKEN_BATCH", 7)
    monkeypatch.setattr(tk, "PIECE_MEMO_SIZE", 50)
    _same([*EDGE_CASES, *random_texts(400, seed=6)])


def test_pieces_split_on_the_white_space_of_the_patterns() -> None:
    # the bulk path relies on str.split() cutting at exactly the characters \s matches
    space = re.compile(r"\s")
    for code in range(0x110000):
        char = chr(code)
        assert (space.match(char) is not None) == char.isspace() == (len(f"a{char}b".split()) == 2), hex(code)


def test_hints_never_match_white_space() -> None:
    # a hint is tested on white-space-free pieces first, so none may match white space: each hint is written only
    # with atoms that cannot (digits, lowercase letters, hex-digit and [a-z0-9-] classes, escaped dots, dashes,
    # colons, a [.:] class, counts, a star) and with alternation and non-capturing groups, which match nothing
    atoms = re.compile(r"(?:\\d|\\\.|[-:a-z0-9|*]|\(\?:|\)|\[0-9a-f\]|\[a-z0-9-\]|\[\.:\]|\{\d+(?:,\d+)?\})+")
    hints = [hint for _, _, _, hint in (*tk._VOLATILE, *tk._FAMILIES) if hint is not None]
    assert len(hints) >= 7
    for hint in hints:
        assert atoms.fullmatch(hint.pattern), hint.pattern
    assert not atoms.fullmatch(r"\d\s+\d") and not atoms.fullmatch(r"a.b") and not atoms.fullmatch(r"a[^b]c")


def test_postings_from_texts_equal_postings_from_token_lists() -> None:
    texts = [*EDGE_CASES, "", *random_texts(800, seed=8), ""]
    built = build_postings(texts)
    reference = postings_from_tokens((tokenize(t) for t in texts), len(texts))
    for field in ("vocabulary", "indptr", "indices", "data", "tf", "lengths"):
        a, b = getattr(built, field), getattr(reference, field)
        assert (a == b) if isinstance(a, list) else np.array_equal(a, b), field
    assert "∅" in built.vocabulary  # empty texts take the stand-in token, in first-occurrence order
    after = [*texts[:300], *random_texts(50, seed=9), ""]
    updated = update_postings(built, texts, after)
    full = postings_from_tokens((tokenize(t) for t in after), len(after))
    # term by term: an update keeps the earlier terms' order (and their ids), a full build orders by first occurrence
    assert _by_term(updated) == _by_term(full)
    assert updated.vocabulary[: len(built.vocabulary)] == built.vocabulary


def _by_term(postings: Postings) -> dict[str, tuple[tuple[int, ...], tuple[float, ...], tuple[int, ...]]]:
    """Each term's chunks, weights and counts (terms with no chunk left out)."""
    found = {}
    for term_id, term in enumerate(postings.vocabulary):
        span = slice(postings.indptr[term_id], postings.indptr[term_id + 1])
        if span.stop > span.start:
            found[term] = (tuple(postings.indices[span].tolist()), tuple(postings.data[span].tolist()),
                           tuple(postings.tf[span].tolist()))
    return found


@pytest.mark.slow
def test_bulk_tokens_equal_per_text_tokens_on_200k_texts_the_library_and_the_eval_queries(library: Library) -> None:
    queries = [json.loads(line)["query"] for line in (REPO / "eval" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
               if line.strip()]
    chunks = [c.text for incident in library.incidents() for c in incident_chunks(incident, library.vocab)]
    assert len(chunks) > 4000 and len(queries) > 500
    _same([*chunks, *queries, *random_texts(200_000, seed=12)])
