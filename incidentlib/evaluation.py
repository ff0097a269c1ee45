"""Retrieval-quality evaluation: recall@1/5/10, MRR@10 and nDCG@10 per mode and query language.

Each query lists the incident ids a correct answer must include.  With several
expected ids, recall@k is the share of them found in the top k; MRR uses the
rank of the first expected id found (0 when none is in the top 10); nDCG@10
uses binary gains.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, ValidationError

from .embeddings import EmbedderConfig
from .search.engine import SearchMode
from .search.fusion import FusionMethod

if TYPE_CHECKING:
    from .library import Library

CUTOFFS = (1, 5, 10)
LANG_GROUPS = ("ko", "en", "mixed", "log")
REPO_EVAL = Path(__file__).resolve().parent.parent / "eval" / "queries.jsonl"


class EvalQuery(BaseModel):
    query: str = Field(min_length=1)
    lang: str
    expected: list[str] = Field(min_length=1)
    kind: str | None = None


class Metrics(BaseModel):
    queries: int
    recall_at_1: float
    recall_at_5: float
    recall_at_10: float
    mrr: float
    ndcg_at_10: float


class ModeReport(BaseModel):
    mode: str
    overall: Metrics
    by_lang: dict[str, Metrics]


class EvalReport(BaseModel):
    queries: int
    modes: list[ModeReport]

    def to_markdown(self) -> str:
        lines = [f"Evaluated on {self.queries} queries.", "", "| mode | R@1 | R@5 | R@10 | MRR | nDCG@10 |", "|---|---|---|---|---|---|"]
        for mode in self.modes:
            m = mode.overall
            lines.append(f"| {mode.mode} | {m.recall_at_1:.3f} | {m.recall_at_5:.3f} | {m.recall_at_10:.3f} | {m.mrr:.3f} | {m.ndcg_at_10:.3f} |")
        groups = [g for g in (*LANG_GROUPS, "cross-lingual") if any(g in mode.by_lang for mode in self.modes)]
        counts = {g: next(mode.by_lang[g].queries for mode in self.modes if g in mode.by_lang) for g in groups}
        lines += ["", "Recall@5 (MRR) by query language:", "",
                  "| mode | " + " | ".join(f"{g} (n={counts[g]})" for g in groups) + " |",
                  "|---|" + "---|" * len(groups)]
        for mode in self.modes:
            cells = [f"{mode.by_lang[g].recall_at_5:.3f} ({mode.by_lang[g].mrr:.3f})" if g in mode.by_lang else "–" for g in groups]
            lines.append(f"| {mode.mode} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"


def default_queries_path() -> Path:
    return REPO_EVAL


def load_queries(path: Path, library: Library) -> list[EvalQuery]:
    if not path.is_file():
        raise ValueError(f"{path}: query file not found")
    items: list[EvalQuery] = []
    problems: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = EvalQuery.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValidationError) as exc:
            problems.append(f"{path}:{number}: {exc}")
            continue
        unknown = [i for i in item.expected if i not in library.data.incidents]
        if unknown:
            problems.append(f"{path}:{number}: expected ids not in the library: {', '.join(unknown)}")
            continue
        items.append(item)
    if problems:
        raise ValueError("bad evaluation queries:\n" + "\n".join(problems))
    return items


def score_ranking(ranked: list[str], expected: list[str]) -> dict[str, float]:
    wanted = set(expected)
    scores = {f"recall_at_{k}": len(wanted & set(ranked[:k])) / len(wanted) for k in CUTOFFS}
    first = next((rank for rank, i in enumerate(ranked[:10], 1) if i in wanted), None)
    scores["mrr"] = 1.0 / first if first else 0.0
    dcg = sum(1.0 / math.log2(rank + 1) for rank, i in enumerate(ranked[:10], 1) if i in wanted)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(wanted), 10) + 1))
    scores["ndcg_at_10"] = dcg / ideal if ideal else 0.0
    return scores


def _mean(rows: list[dict[str, float]]) -> Metrics:
    n = len(rows)
    return Metrics(queries=n, **{key: round(sum(r[key] for r in rows) / n, 4) for key in rows[0]})


def _is_cross_lingual(item: EvalQuery, library: Library) -> bool:
    """A Korean query whose answers have no Korean body, or an English one with no English body."""
    if item.lang not in ("ko", "en"):
        return False
    return all(not getattr(library.get(i).body, item.lang) for i in item.expected)


def run_evaluation(library: Library, items: list[EvalQuery], embedders: list[str], cache_dir: Path | None = None) -> EvalReport:
    runs: dict[str, list[list[str]]] = {}
    lexical_runs = [[h.incident_id for h in library._search_engine.search(q.query, k=10, mode=SearchMode.lexical)] for q in items]
    runs["lexical (BM25)"] = lexical_runs
    for name in embedders:
        # the library's other settings (the search backend among them) carry over; only the embedder changes
        config = library.search_config.model_copy(update={"embedder": EmbedderConfig(backend=name), "cache_dir": cache_dir})
        lib = type(library)(library.data, config)
        engine = lib._search_engine
        dense_runs, rrf_runs, weighted_runs, similar_runs = [], [], [], []
        for q in items:
            lexical = engine.rank_lexical(q.query, None, 50)
            dense = engine.rank_dense(q.query, None, 50)
            dense_runs.append([i for i, _, _ in dense[:10]])
            rrf_runs.append([h.incident_id for h in engine.fuse_rankings(lexical, dense, 10, FusionMethod.rrf)])
            weighted_runs.append([h.incident_id for h in engine.fuse_rankings(lexical, dense, 10, FusionMethod.weighted)])
            similar_runs.append([r.id for r in lib._search_service.similar_to_text(q.query, k=10)])
        runs[f"dense {name}"] = dense_runs
        runs[f"hybrid-rrf {name}"] = rrf_runs
        runs[f"hybrid-weighted {name}"] = weighted_runs
        runs[f"similar {name}"] = similar_runs

    cross = [_is_cross_lingual(q, library) for q in items]
    modes = []
    for mode, ranked_lists in runs.items():
        rows = [score_ranking(ranked, q.expected) for ranked, q in zip(ranked_lists, items, strict=True)]
        groups: dict[str, list[dict[str, float]]] = defaultdict(list)
        for row, q, is_cross in zip(rows, items, cross, strict=True):
            groups[q.lang].append(row)
            if is_cross:
                groups["cross-lingual"].append(row)
        modes.append(ModeReport(mode=mode, overall=_mean(rows), by_lang={g: _mean(r) for g, r in groups.items()}))
    return EvalReport(queries=len(items), modes=modes)
