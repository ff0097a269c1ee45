"""Korean and English morphology for BM25: the hand-written particle stripper against kiwipiepy
(a maintained Korean analyser) and a Snowball English stemmer, on eval/queries.jsonl (lexical mode,
so the tokenizer is the only thing that changes).

    PYTHONPATH=. python bench/morphology.py

Variants (Latin-script handling is the project tokenizer's in every variant unless stated):

- ``particles`` — the project tokenizer (particles/endings stripped, stem bigrams added);
- ``kiwi`` — Hangul words replaced by kiwipiepy morphemes (content tags only: nouns, verb and
  adjective stems, roots, foreign words, numbers), no bigrams;
- ``kiwi+bigrams`` — kiwi morphemes plus the character bigrams of each noun;
- ``particles+snowball`` — the project tokenizer with English words stemmed by Snowball.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import bm25s
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from incidentlib import Library
from incidentlib.evaluation import default_queries_path, load_queries, score_ranking
from incidentlib.search import tokenize as project

_HANGUL_RUN = re.compile(r"[\uac00-\ud7a3]+")
_CONTENT_TAGS = ("NNG", "NNP", "NNB", "VV", "VA", "XR", "SL", "SN", "SH")


def kiwi_tokenizer(bigrams: bool) -> Callable[[str], list[str]]:
    from kiwipiepy import Kiwi

    kiwi = Kiwi()

    def tokenize(text: str) -> list[str]:
        latin = project.tokenize(_HANGUL_RUN.sub(" ", text))
        korean: list[str] = []
        if _HANGUL_RUN.search(text):
            for token in kiwi.tokenize(text):
                if token.tag.startswith(_CONTENT_TAGS) and _HANGUL_RUN.fullmatch(token.form):
                    korean.append(token.form)
                    if bigrams and token.tag.startswith("NN") and len(token.form) > 2:
                        korean.extend(token.form[i : i + 2] for i in range(len(token.form) - 1))
        return latin + korean

    return tokenize


def snowball_tokenizer() -> Callable[[str], list[str]]:
    import snowballstemmer

    stemmer = snowballstemmer.stemmer("english")

    def tokenize(text: str) -> list[str]:
        return [stemmer.stemWord(t) if t.isascii() and t.isalpha() else t for t in project.tokenize(text)]

    return tokenize


def evaluate(library: Library, tokenize: Callable[[str], list[str]]) -> dict[str, tuple[float, float, int]]:
    chunks = library._search_engine.chunks
    owners = np.array([c.incident_id for c in chunks])
    retriever = bm25s.BM25()
    retriever.index([tokenize(c.text) or ["∅"] for c in chunks], show_progress=False)
    rows: dict[str, list[dict[str, float]]] = {}
    for item in load_queries(default_queries_path(), library):
        tokens = tokenize(item.query)
        scores = np.asarray(retriever.get_scores(tokens)) if tokens else np.zeros(len(chunks))
        best: dict[str, float] = {}
        for i in np.argsort(-scores):
            if scores[i] <= 0:
                break
            best.setdefault(str(owners[i]), float(scores[i]))
        ranked = list(best)[:10]
        row = score_ranking(ranked, item.expected)
        rows.setdefault(item.lang, []).append(row)
        rows.setdefault("all", []).append(row)
    return {g: (float(np.mean([r["recall_at_5"] for r in rs])), float(np.mean([r["mrr"] for r in rs])), len(rs)) for g, rs in rows.items()}


def main() -> None:
    library = Library.open()
    variants = {
        "particles (current)": project.tokenize,
        "kiwi": kiwi_tokenizer(bigrams=False),
        "kiwi+bigrams": kiwi_tokenizer(bigrams=True),
        "particles+snowball": snowball_tokenizer(),
    }
    results = {name: evaluate(library, fn) for name, fn in variants.items()}
    groups = ["all", "ko", "en", "mixed", "log"]
    counts = results["particles (current)"]
    print("| tokenizer (BM25 only) | " + " | ".join(f"{g} (n={counts[g][2]}) R@5 / MRR" for g in groups if g in counts) + " |")
    print("|---|" + "---|" * sum(g in counts for g in groups))
    for name, result in results.items():
        print(f"| {name} | " + " | ".join(f"{result[g][0]:.3f} / {result[g][1]:.3f}" for g in groups if g in result) + " |")


if __name__ == "__main__":
    main()
