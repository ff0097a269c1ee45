"""The web app's pages through the ASGI app: content, language, errors, and the pictures' geometry."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient

from incidentlib.api.app import ServiceSettings, create_app
from incidentlib.web._figures import highlight, neighbourhood, timeline


@pytest.fixture(scope="module")
def client(search_library) -> TestClient:
    # the Host allow-list accepts loopback names, not TestClient's default "testserver"
    return TestClient(create_app(search_library, ServiceSettings(mount_mcp=False)), base_url="http://127.0.0.1:8000")


class _Controls(HTMLParser):
    """Collects <title>, form controls and <label for=…> of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.title, self.in_title = "", False
        self.controls: list[dict[str, str | None]] = []
        self.label_for: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "title":
            self.in_title = True
        elif tag in {"input", "select", "textarea"} and values.get("type") != "hidden":
            self.controls.append(values)
        elif tag == "label" and values.get("for"):
            self.label_for.add(values["for"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title += data


PAGES = ["/", "/?q=NCCL", "/ui/seen", "/ui/series", "/ui/seen?text=Xid+79", "/ui/incidents/IL-0025", "/ui/topics", "/ui/topics/nccl",
         "/ui/topics/imbue", "/ui/clusters", "/ui/review"]


@pytest.mark.parametrize("path", PAGES)
@pytest.mark.parametrize("lang", ["en", "ko"])
def test_every_page_has_a_title_and_labelled_controls(client: TestClient, path: str, lang: str) -> None:
    response = client.get(path, params={"lang": lang})
    assert response.status_code == 200, response.text[:500]
    assert response.headers["content-type"].startswith("text/html")
    page = _Controls()
    page.feed(response.text)
    assert page.title.strip()
    assert f'<html lang="{lang}">' in response.text
    for control in page.controls:
        assert control.get("id") in page.label_for or control.get("aria-label"), control


def test_language_follows_query_then_accept_language(client: TestClient) -> None:
    assert '<html lang="ko">' in client.get("/", headers={"Accept-Language": "ko-KR,ko;q=0.9"}).text
    assert '<html lang="en">' in client.get("/", params={"lang": "en"}, headers={"Accept-Language": "ko"}).text
    # the switch link keeps the rest of the URL and flips only the language
    text = client.get("/ui/topics/nccl", params={"lang": "en"}).text
    assert 'href="/ui/topics/nccl?lang=ko"' in text


def test_search_page_highlights_the_matched_passage(client: TestClient) -> None:
    text = client.get("/", params={"q": "NCCL watchdog timeout", "lang": "en"}).text
    assert "IL-0025" in text
    assert re.search(r"<mark>(?i:nccl|watchdog|timeout)</mark>", text)
    fragment = client.get("/ui/results", params={"q": "워치독 타임아웃", "lang": "ko"})
    assert fragment.status_code == 200 and "<html" not in fragment.text and "IL-" in fragment.text


def test_filters_narrow_the_results_and_bad_filters_say_why(client: TestClient, search_library) -> None:
    text = client.get("/", params={"q": "outage", "org": "cloudflare"}).text
    ids = set(re.findall(r'href="/ui/incidents/(IL-\d{4})', text))
    assert ids and all(search_library.get(i).org == "cloudflare" for i in ids)
    bad = client.get("/", params={"q": "x", "severity": "sev9"})
    assert bad.status_code == 400 and "severity" in bad.text


def test_incident_page_shows_related_in_the_seed_form(client: TestClient, search_library) -> None:
    text = client.get("/ui/incidents/IL-0025", params={"lang": "ko"}).text
    related = search_library.related("IL-0025", lang="ko", limit=10)
    assert related
    assert any(c.kind == "cause" for item in related[:4] for c in item.shared_concepts)  # the cause part is exercised
    for item in related[:4]:
        assert item.id in text
        said = item.shared_phrase("ko")
        if said:  # the seed's form: the shared causes, then the shared components, inferred ones marked
            assert f'<span class="shared">{html.escape(said, quote=False)}</span>' in text, said
            assert said.startswith(("같은 원인 ", "공통 ")) and "(inferred)" not in said
    assert text.count('data-node="') >= 5  # the neighbourhood graph has nodes
    assert 'href="/ui/topics/nccl?lang=ko"' in text


def test_unknown_incident_is_a_404_page_with_suggestions(client: TestClient) -> None:
    response = client.get("/ui/incidents/IL-00251")
    assert response.status_code == 404 and "IL-00251" in response.text
    assert client.get("/ui/topics/no-such-concept").status_code == 404


def test_lower_case_id_redirects_to_the_canonical_url(client: TestClient) -> None:
    response = client.get("/ui/incidents/il-0025", follow_redirects=False)
    assert response.status_code == 308 and response.headers["location"].startswith("/ui/incidents/IL-0025")


def test_seen_page_diagnoses_a_pasted_watchdog_line(client: TestClient) -> None:
    line = ("[rank12]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=77120, OpType=_ALLGATHER_BASE, NumelIn=1, NumelOut=8, Timeout(ms)=600000) "
            "ran for 600184 milliseconds before timing out.")
    text = client.get("/ui/seen", params={"text": line, "lang": "en"}).text
    assert "IL-0025" in text and "NCCL" in text
    assert 'id="h-causes"' in text


def test_seen_page_takes_a_whole_write_up_by_its_form(client: TestClient, search_library) -> None:
    """The page's form posts its text, so a postmortem longer than a link's query is read whole; the page's own
    form says how long a text may be, and a longer one gets the page's error naming the limit."""
    from incidentlib.requests import MAX_QUERY_CHARS, MAX_SIMILAR_TEXT_CHARS
    from incidentlib.tagging.tagger import incident_text

    form = client.get("/ui/seen", params={"lang": "ko"}).text
    assert 'action="/ui/seen?lang=ko" method="post"' in form and f'maxlength="{MAX_SIMILAR_TEXT_CHARS}"' in form
    write_up = incident_text(search_library.get("IL-0025"))
    assert len(write_up) > MAX_QUERY_CHARS
    assert client.get("/ui/seen", params={"text": write_up}).status_code in (400, 422)  # a link keeps the short limit
    page = client.post("/ui/seen", params={"lang": "en"}, data={"text": write_up})
    assert page.status_code == 200 and 'id="h-similar"' in page.text and 'id="h-causes"' in page.text
    assert re.search(r"IL-\d{4}", page.text[page.text.index('id="h-similar"'):]).group() == "IL-0025"  # type: ignore[union-attr]
    too_long = client.post("/ui/seen", params={"lang": "en"}, data={"text": "x" * (MAX_SIMILAR_TEXT_CHARS + 1)})
    assert too_long.status_code == 400 and f"the limit is {MAX_SIMILAR_TEXT_CHARS:,}" in too_long.text
    empty = client.post("/ui/seen", params={"lang": "en"}, data={"text": ""})
    assert empty.status_code == 200 and 'id="h-similar"' not in empty.text


def test_json_api_is_unchanged_beside_the_pages(client: TestClient) -> None:
    assert client.get("/incidents/IL-0025").headers["content-type"].startswith("application/json")
    assert "/ui/seen" not in client.get("/openapi.json").text  # pages stay out of the API contract


def test_highlight_escapes_text_and_marks_terms() -> None:
    out = str(highlight("<b>NCCL</b> 타임아웃이 났다", ["nccl", "타임아웃", "a"]))
    assert out == "&lt;b&gt;<mark>NCCL</mark>&lt;/b&gt; <mark>타임아웃</mark>이 났다"


def test_timeline_orders_dates_and_stacks_close_ones() -> None:
    line = timeline([("IL-2", "b", "2024-06-25"), ("IL-1", "a", "2021"), ("IL-3", "c", "2024-06-26"), ("IL-4", "d", None)],
                    "/ui/incidents/{id}")
    assert line is not None
    assert [p.id for p in line.points] == ["IL-1", "IL-2", "IL-3"]
    assert line.points[0].x < line.points[1].x <= line.points[2].x
    assert line.points[1].y != line.points[2].y  # a day apart: drawn on different rows
    assert [y for y, _ in line.years] == [2021, 2022, 2023, 2024, 2025]
    assert timeline([("IL-4", "d", None)], "/{id}") is None


def test_neighbourhood_is_deterministic_and_inside_the_canvas(search_library) -> None:
    detail = search_library.detail("IL-0025", lang="en")
    first = neighbourhood(detail, "/i/{id}", "/t/{id}")
    second = neighbourhood(detail, "/i/{id}", "/t/{id}")
    assert first == second
    assert sum(n.center for n in first.nodes) == 1
    assert all(0 <= n.x <= first.width and 0 <= n.y <= first.height for n in first.nodes)
    assert {n.href for n in first.nodes if n.kind == "incident"} >= {f"/i/{r.id}" for r in detail.related[:3]}


def _series_csv(shape: str, seed: int) -> str:
    from incidentlib.analysis.synthetic import generate

    series, _ = generate(shape, seed)
    rows = ["seconds,mfu"] + [f"{p.seconds},{'' if p.value is None else p.value}" for p in series.points]
    return "\n".join(rows) + "\n"


def test_series_page_plots_a_pasted_or_uploaded_curve(client: TestClient) -> None:
    csv = _series_csv("thermal-throttle", 1001)
    pasted = client.post("/ui/series", params={"lang": "en"}, data={"text": csv})
    assert pasted.status_code == 200
    assert 'class="curve"' in pasted.text and 'class="dip"' in pasted.text
    assert "IL-0025" in pasted.text
    uploaded = client.post("/ui/series", params={"lang": "ko"}, files={"file": ("run.csv", csv.encode(), "text/csv")})
    assert uploaded.status_code == 200 and "IL-0025" in uploaded.text and '<html lang="ko">' in uploaded.text
    short = client.post("/ui/series", data={"text": "seconds,mfu\n0,0.5\n1,0.5\n"})
    assert short.status_code == 200 and "Cannot tell" in short.text
    for bad, field in [({"text": "seconds,mfu\n0,abc\n"}, "mfu"), ({"text": ""}, "text"),
                       ({"text": "seconds,mfu\n0,1\n", "expected": "x"}, "expected")]:
        response = client.post("/ui/series", data=bad)
        assert response.status_code == 400 and field in response.text


@pytest.mark.parametrize("page", ["/ui/series", "/ui/seen"])
def test_a_posted_page_computes_off_the_event_loop(search_library, monkeypatch: pytest.MonkeyPatch, page: str) -> None:
    """While one posted page is still computing, another request is answered: the work runs in the thread pool,
    not on the event loop that every request shares.  (Were it on the loop, the other request would wait for the
    computation, which waits for that request: bounded here by the 30 s the computation waits.)"""
    import threading

    name = "diagnose_series" if page == "/ui/series" else "similar"
    real = getattr(search_library, name)
    started, release = threading.Event(), threading.Event()

    def held(*args: object, **kwargs: object) -> object:
        started.set()
        assert release.wait(30), "no other request was answered while this page computed"
        return real(*args, **kwargs)

    monkeypatch.setattr(search_library, name, held)
    form = {"text": _series_csv("thermal-throttle", 1002)} if page == "/ui/series" else {"text": "Xid 79 GPU has fallen off the bus"}
    answered: list[int] = []
    # entered, the client runs every request on one event loop, as a server does
    with TestClient(create_app(search_library, ServiceSettings(mount_mcp=False)), base_url="http://127.0.0.1:8000") as one_loop:
        posting = threading.Thread(target=lambda: answered.append(one_loop.post(page, data=form).status_code))
        posting.start()
        assert started.wait(30)
        other = one_loop.get("/health")
        release.set()
        posting.join(60)
    assert other.status_code == 200 and answered == [200]


def test_shared_concepts_are_marked_broader_and_inferred_in_both_languages(client: TestClient) -> None:
    """Pasted text has only inferred concepts, so every concept it shares is marked inferred; a concept shared only
    through narrower ones is marked broader (rendered from a result made here, since which results show one depends
    on the ranking)."""
    from incidentlib.views import ConceptRef, MatchedChunk, SearchResult, Why
    from incidentlib.web._i18n import texts
    from incidentlib.web._routes import INCIDENT_HREF, templates

    line = "NCCL watchdog caught collective operation timeout on an InfiniBand fabric; a GPU fell off the bus (Xid 79)"
    for lang, mark in (("en", "(inferred)"), ("ko", "(추론)")):
        page = client.get("/ui/seen", params={"text": line, "lang": lang}).text
        assert f"<small>{mark}</small>" in page
    why = Why(chunk=MatchedChunk(id="IL-0001#0", kind="summary", lang="en", text="a firmware bug"), matched_terms=[],
              shared_concepts=[ConceptRef(id="software-bug", kind="cause", label="Software bug", broader=True),
                               ConceptRef(id="nccl", kind="component", label="NCCL")])
    result = SearchResult(id="IL-0001", score=1.0, title="t", org="o", date=None, snippet="s", why=why, status="published")
    for lang, mark in (("en", "(broader)"), ("ko", "(상위 개념)")):
        html = templates.get_template("_results.html").render(t=texts(lang), lang=lang, q="", results=[result],
                                                              incident_href=INCIDENT_HREF, hide_count=True)
        assert f"Software bug <small>{mark}</small></a>" in html and ">NCCL</a>" in html


def test_the_shared_phrase_names_causes_then_components_and_marks_inferred_ones() -> None:
    from incidentlib.views import ConceptRef, RelatedItem

    item = RelatedItem(id="IL-0002", title="t", org="meta", date=None, shared=[], score=1.0, shared_concepts=[
        ConceptRef(id="nccl", kind="component", label="NCCL"),
        ConceptRef(id="firmware-bug", kind="cause", label="firmware bug", inferred=True),
        ConceptRef(id="infiniband-fabric", kind="component", label="InfiniBand fabric")])
    assert item.shared_phrase("en") == "same cause firmware bug (inferred) · shared NCCL, InfiniBand fabric"
    assert item.shared_phrase("ko") == "같은 원인 firmware bug (추론) · 공통 NCCL, InfiniBand fabric"
    assert item.model_copy(update={"shared_concepts": []}).shared_phrase("en") == ""
