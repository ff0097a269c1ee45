"""Pictures of the library: a 2D map of incidents and a neighbourhood graph of one incident.

The map projects incident vectors to 2D with t-SNE (seeded, PCA-initialised) and
colours points by graph cluster.  Only one label per cluster is drawn (its
representative), and labels are pushed apart (adjustText) so they stay legible;
the HTML page shows every incident on hover and links to its record.

Korean labels use the NanumGothic font shipped in the ``koreanize-matplotlib``
package, registered without changing global matplotlib settings.
"""

from __future__ import annotations

import html
import io
import json
from functools import lru_cache
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # images are rendered off-screen, also on servers without a display

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
from matplotlib import font_manager

from ..views import ClusterSet

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354",
           "#756bb1", "#636363"]
NODE_COLOURS = {"incident": "#1f77b4", "component": "#2ca02c", "cause": "#d62728", "symptom": "#ff7f0e",
                "organization": "#7f7f7f", "tag": "#bcbd22"}


@lru_cache(maxsize=1)
def font_family() -> str:
    """NanumGothic when available (Hangul glyphs), else matplotlib's default sans-serif."""
    import importlib.util

    # locate the package's font files without importing it (its import changes global matplotlib settings)
    spec = importlib.util.find_spec("koreanize_matplotlib")
    locations = list(spec.submodule_search_locations or []) if spec else []
    fonts = sorted(Path(locations[0], "fonts").glob("NanumGothic*.ttf")) if locations else []
    if not fonts:  # pragma: no cover - depends on the install
        return "DejaVu Sans"
    for path in fonts:
        font_manager.fontManager.addfont(str(path))
    return "NanumGothic"


# t-SNE perplexity: sklearn's default (30), lowered for small inputs because it must stay below the
# number of points; (n - 1) / 3 and the floor of 2 are the usual rule of thumb, not tuned here.
MAX_PERPLEXITY = 30.0
MIN_PERPLEXITY = 2.0
# Fewer points than this are laid out on a line: t-SNE needs a few neighbours per point.
MIN_TSNE_POINTS = 4


def project(vectors: np.ndarray, seed: int = 0) -> np.ndarray:
    from sklearn.manifold import TSNE

    if len(vectors) < MIN_TSNE_POINTS:
        return np.column_stack([np.arange(len(vectors), dtype=float), np.zeros(len(vectors))])
    perplexity = max(MIN_PERPLEXITY, min(MAX_PERPLEXITY, (len(vectors) - 1) / 3))
    points: np.ndarray = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed, metric="cosine").fit_transform(vectors)
    return points


def _membership(clusters: ClusterSet) -> dict[str, int]:
    return {m.id: index for index, cluster in enumerate(clusters.clusters) for m in cluster.members}


def sampled_note(shown: int, total: int, lang: str) -> str:
    """The line that says a map shows a sample ("" when it shows every incident)."""
    if shown >= total:
        return ""
    if lang == "ko":
        return f"사고 {total:,}건 중 {shown:,}건 표시 (클러스터별 비율을 유지한 표본)"
    return f"{shown:,} of {total:,} incidents shown (a sample keeping each cluster's share)"


def map_png(ids: list[str], titles: dict[str, str], points: np.ndarray, clusters: ClusterSet, lang: str,
            total: int | None = None) -> bytes:
    from adjustText import adjust_text

    membership = _membership(clusters)
    family = font_family()
    fig, ax = plt.subplots(figsize=(14, 10), dpi=110)
    for index, cluster in enumerate(clusters.clusters):
        rows = [i for i, incident_id in enumerate(ids) if membership.get(incident_id) == index]
        if rows:
            ax.scatter(points[rows, 0], points[rows, 1], s=28, color=PALETTE[index % len(PALETTE)], alpha=0.85,
                       label=f"{cluster.id} ({cluster.size}) {cluster.label}"[:70])
    texts = []
    position = {incident_id: i for i, incident_id in enumerate(ids)}
    for cluster in clusters.clusters:
        if cluster.size < 4 or cluster.representative not in position:
            continue
        x, y = points[position[cluster.representative]]
        label = f"{cluster.representative}: {titles[cluster.representative]}"
        texts.append(ax.text(x, y, label if len(label) <= 38 else label[:37] + "…", fontsize=8, family=family,
                             bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "#999999", "alpha": 0.85}))
    if texts:
        adjust_text(texts, ax=ax, expand=(1.3, 1.8), arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.6})
    ax.set_xticks([])
    ax.set_yticks([])
    title = "사고 지도 (임베딩 t-SNE, 색 = 그래프 클러스터)" if lang == "ko" else "Incident map (embedding t-SNE, colour = graph cluster)"
    note = sampled_note(len(ids), total if total is not None else len(ids), lang)
    ax.set_title(f"{title}\n{note}" if note else title, family=family, fontsize=13)
    legend = ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7.5, frameon=False, prop={"family": family, "size": 7.5})
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_extra_artists=(legend,), bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def map_html(ids: list[str], titles: dict[str, str], points: np.ndarray, clusters: ClusterSet, lang: str,
             link: str = "/incidents/{id}", total: int | None = None) -> str:
    """A self-contained interactive page (inline SVG and script, no external assets)."""
    membership = _membership(clusters)
    xs, ys = points[:, 0], points[:, 1]
    span_x, span_y = float(np.ptp(xs)) or 1.0, float(np.ptp(ys)) or 1.0
    width, height, pad = 1000, 720, 30
    data = [
        {"id": incident_id, "title": titles[incident_id],
         "x": round(pad + (float(xs[i]) - float(xs.min())) / span_x * (width - 2 * pad), 1),
         "y": round(pad + (float(ys[i]) - float(ys.min())) / span_y * (height - 2 * pad), 1),
         "c": membership.get(incident_id, -1)}
        for i, incident_id in enumerate(ids)
    ]
    legend = [{"id": c.id, "label": c.label, "size": c.size, "colour": PALETTE[i % len(PALETTE)]} for i, c in enumerate(clusters.clusters)]
    heading = "사고 지도" if lang == "ko" else "Incident map"
    sampled = sampled_note(len(ids), total if total is not None else len(ids), lang)
    note = f'\n<p class="sampled">{html.escape(sampled)}</p>' if sampled else ""
    payload = json.dumps({"points": data, "legend": legend, "palette": PALETTE, "link": link}, ensure_ascii=False)
    return f"""<!doctype html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{html.escape(heading)} · incidentlib</title>
<style>
body{{font-family:system-ui,"Apple SD Gothic Neo","Noto Sans KR",sans-serif;margin:16px;color:#222}}
#wrap{{display:flex;gap:16px;align-items:flex-start}} svg{{border:1px solid #ddd;background:#fff}}
circle{{cursor:pointer;stroke:#fff;stroke-width:1}} circle.dim{{opacity:.12}}
#tip{{position:fixed;pointer-events:none;background:#222;color:#fff;padding:4px 8px;border-radius:4px;font-size:13px;display:none;max-width:420px}}
ul{{list-style:none;padding:0;margin:0;font-size:13px}} li{{cursor:pointer;margin:3px 0}} li span{{display:inline-block;width:12px;height:12px;margin-right:6px;border-radius:6px;vertical-align:middle}}
input{{width:320px;padding:4px;margin-bottom:8px}}
</style></head><body>
<h1>{html.escape(heading)}</h1>{note}
<input id="q" placeholder="{'제목이나 ID로 찾기' if lang == 'ko' else 'filter by title or id'}">
<div id="wrap"><svg id="map" width="{width}" height="{height}" role="img" aria-label="{html.escape(heading)}"></svg><ul id="legend"></ul></div>
<div id="tip"></div>
<script>
const DATA = {payload};
const svg = document.getElementById('map'), tip = document.getElementById('tip');
const ns = 'http://www.w3.org/2000/svg';
const dots = DATA.points.map(p => {{
  const c = document.createElementNS(ns, 'circle');
  c.setAttribute('cx', p.x); c.setAttribute('cy', p.y); c.setAttribute('r', 6);
  c.setAttribute('fill', p.c >= 0 ? DATA.palette[p.c % DATA.palette.length] : '#999');
  c.dataset.cluster = p.c; c.dataset.text = (p.id + ' ' + p.title).toLowerCase();
  c.addEventListener('mousemove', e => {{ tip.style.display = 'block'; tip.style.left = (e.clientX + 12) + 'px';
    tip.style.top = (e.clientY + 12) + 'px'; tip.textContent = p.id + ' — ' + p.title; }});
  c.addEventListener('mouseleave', () => tip.style.display = 'none');
  c.addEventListener('click', () => window.open(DATA.link.replace('{{id}}', p.id), '_blank'));
  svg.appendChild(c); return c;
}});
const legend = document.getElementById('legend');
DATA.legend.forEach((item, index) => {{
  const li = document.createElement('li');
  li.innerHTML = '<span style="background:' + item.colour + '"></span>';
  li.appendChild(document.createTextNode(item.id + ' (' + item.size + ') ' + item.label));
  li.addEventListener('mouseenter', () => dots.forEach(d => d.classList.toggle('dim', d.dataset.cluster != index)));
  li.addEventListener('mouseleave', () => dots.forEach(d => d.classList.remove('dim')));
  legend.appendChild(li);
}});
document.getElementById('q').addEventListener('input', e => {{
  const q = e.target.value.toLowerCase();
  dots.forEach(d => d.classList.toggle('dim', q && !d.dataset.text.includes(q)));
}});
</script></body></html>
"""


def neighbourhood_png(graph: nx.Graph, center: str, labels: dict[str, str], lang: str, max_nodes: int = 28) -> bytes:
    """The incident, its concepts and its closest related incidents, drawn so labels stay readable."""
    family = font_family()
    keep = [center, *[n for n in graph.nodes if n != center][:max_nodes - 1]]
    sub = graph.subgraph(keep)
    layout = nx.kamada_kawai_layout(sub) if len(sub) > 2 else nx.spring_layout(sub, seed=1)
    fig, ax = plt.subplots(figsize=(12, 9), dpi=110)
    nx.draw_networkx_edges(sub, layout, ax=ax, edge_color="#bbbbbb", width=1.0)
    for node_type, colour in NODE_COLOURS.items():
        nodes = [n for n in sub.nodes if n.split(":", 1)[0] == node_type]
        if nodes:
            sizes = [900 if n == center else (420 if node_type == "incident" else 260) for n in nodes]
            nx.draw_networkx_nodes(sub, layout, nodelist=nodes, node_color=colour, node_size=sizes, ax=ax,
                                   label=node_type, alpha=0.9)
    from adjustText import adjust_text

    texts = []
    for node, (x, y) in layout.items():
        text = labels[node]
        text = text if len(text) <= 36 else text[:35] + "…"
        texts.append(ax.text(x, y, text, ha="center", va="bottom", fontsize=8.5 if node != center else 10, family=family,
                             bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85}))
    adjust_text(texts, ax=ax, arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.5})
    ax.legend(loc="lower left", fontsize=8, frameon=False, markerscale=0.5)
    ax.set_title(labels[center], family=family, fontsize=12)
    ax.margins(0.12)
    ax.axis("off")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
