"""The web app's own words, in both languages.

Incident text comes from the library in the requested language; these are only the
labels of the pages themselves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_TEXT: dict[str, tuple[str, str]] = {
    # key: (English, Korean)
    "site": ("incidentlib", "incidentlib"),
    "tagline": ("Infrastructure incidents, searchable in Korean and English",
                "한국어와 영어로 찾는 인프라 장애 사례"),
    "nav_search": ("Search", "검색"),
    "nav_seen": ("Have we seen this?", "본 적 있는 장애인가?"),
    "nav_series": ("Training run", "학습 곡선"),
    "nav_topics": ("Topics", "주제"),
    "nav_clusters": ("Clusters", "클러스터"),
    "nav_review": ("Review", "검토"),
    "nav_import": ("Import", "가져오기"),
    "switch_lang": ("한국어", "English"),
    "switch_lang_label": ("Switch language", "언어 바꾸기"),
    "search_label": ("Search incidents", "장애 사례 검색"),
    "search_placeholder": ("e.g. NCCL watchdog timeout, 타임아웃, Xid 79", "예: NCCL 워치독 타임아웃, Xid 79, cooling"),
    "search_button": ("Search", "검색"),
    "filters": ("Filters", "필터"),
    "any": ("any", "전체"),
    "org": ("Organization", "조직"),
    "component": ("Component", "구성 요소"),
    "cause": ("Cause", "원인"),
    "symptom": ("Symptom", "증상"),
    "tag": ("Tag", "태그"),
    "year": ("Year", "연도"),
    "severity": ("Severity", "심각도"),
    "inferred_filter": ("Component and cause: also match concepts inferred from the text (not yet reviewed)",
                        "구성 요소·원인: 본문에서 추론된, 아직 검토되지 않은 개념도 포함"),
    "results_for": ("Results for", "검색 결과:"),
    "no_results": ("No incident matches. Try fewer words or remove a filter.",
                   "맞는 사례가 없습니다. 검색어를 줄이거나 필터를 빼 보세요."),
    "results_range": ("{first}–{last}", "{first}–{last}번째"),
    "results_more": ("(more on the next page)", "(다음 페이지에 더 있음)"),
    "no_words": ("No incident contains the words of “{q}”. The incidents below are only the nearest in meaning and may "
                 "be unrelated.",
                 "“{q}”의 낱말이 들어 있는 사례가 없습니다. 아래 사례는 뜻으로 가장 가까운 것일 뿐이며 관련이 없을 수 있습니다."),
    "listed_count": ("{total} incident(s) match the filters; {first}–{last} on this page.",
                     "필터에 맞는 사례 {total}건 중 이 페이지에 {first}–{last}번째가 있습니다."),
    "page_n": ("page {page}", "{page}쪽"),
    "start_hint": ("Type a symptom, an error message or a component; results appear as you type. "
                   "Press / to jump to the search box.",
                   "증상, 오류 메시지, 구성 요소를 입력하면 바로 결과가 나옵니다. / 키로 검색창에 갈 수 있습니다."),
    "matched_terms": ("matched", "일치한 말"),
    "shared_concepts": ("shared", "공통"),
    # beside a shared concept: shared only through narrower concepts / recognised in the text, not curated
    "mark_broader": ("broader", "상위 개념"),
    "mark_inferred": ("inferred", "추론"),
    "passage": ("passage", "구절"),
    "seen_title": ("Have we seen this before?", "이런 장애를 본 적이 있나?"),
    "seen_label": ("Paste an error, a log excerpt or a description", "오류, 로그 일부, 설명을 붙여 넣으세요"),
    "seen_button": ("Find similar incidents", "비슷한 사례 찾기"),
    "seen_hint": ("Hostnames, ranks and addresses may differ from yours; the shape of the message is what counts. "
                  "A whole postmortem works too.",
                  "호스트 이름, 랭크, 주소는 달라도 됩니다. 메시지의 모양이 중요합니다. 포스트모템 전체를 붙여 넣어도 됩니다."),
    "similar": ("Similar incidents", "비슷한 사례"),
    "likely_causes": ("Likely causes", "유력한 원인"),
    "likely_components": ("Components involved", "관련 구성 요소"),
    "confidence": ("Confidence", "신뢰도"),
    "because_of": ("seen in", "근거 사례"),
    "signals": ("Error signals", "오류 신호"),
    "recognised": ("Recognised in your text", "입력에서 알아본 개념"),
    "series_title": ("Diagnose a training run from its MFU curve", "MFU 곡선으로 학습 진단하기"),
    "series_intro": ("Paste or upload the curve (CSV with seconds,mfu — optional throttle and event columns — or JSON). "
                     "MFU is a fraction of expected unless you give the expected value.",
                     "곡선을 붙여 넣거나 파일로 올리세요(seconds,mfu 열의 CSV — throttle, event 열은 선택 — 또는 JSON). "
                     "기대값을 주지 않으면 MFU를 기대값 대비 비율로 읽습니다."),
    "series_label": ("Series (CSV or JSON)", "시계열 (CSV 또는 JSON)"),
    "series_file": ("…or a file", "…또는 파일"),
    "series_expected": ("Expected MFU (when the values are absolute)", "기대 MFU (값이 절대값일 때)"),
    "series_button": ("Diagnose", "진단"),
    "shape": ("Shape", "모양"),
    "cannot_tell": ("Cannot tell", "판단 불가"),
    "evidence": ("Evidence", "근거"),
    "likely": ("Usual cause", "흔한 원인"),
    "features": ("Measured", "측정값"),
    "plot": ("MFU curve", "MFU 곡선"),
    "plot_legend": ("dashed: expected (100%) · dotted: median level · red ticks: dips · grey lines: restarts",
                    "점선: 기대치(100%) · 짧은 점선: 중앙값 수준 · 빨간 눈금: 처짐 · 회색 선: 재시작"),
    "incidents_like": ("Incidents that show this pattern", "이 패턴을 보인 사례"),
    "narrative": ("What happened", "무슨 일이 있었나"),
    "summary": ("Summary", "요약"),
    "detection": ("Detection", "탐지"),
    "mitigation": ("Mitigation", "대응"),
    "lessons": ("Lessons", "교훈"),
    "sources": ("Sources", "출처"),
    "components": ("Components", "구성 요소"),
    "causes": ("Causes", "원인"),
    "symptoms": ("Symptoms", "증상"),
    "tags": ("Tags", "태그"),
    "related": ("Related incidents", "관련 사례"),
    "curated": ("curated link", "큐레이터 연결"),
    "graph": ("Neighbourhood graph", "이웃 그래프"),
    "graph_help": ("Drag to pan, scroll or use + and − to zoom, click a node to open it.",
                   "끌어서 이동하고, 스크롤이나 + − 로 확대·축소하고, 노드를 눌러 여세요."),
    "zoom_in": ("Zoom in", "확대"),
    "zoom_out": ("Zoom out", "축소"),
    "zoom_reset": ("Reset view", "처음 보기"),
    "body_fallback": ("This narrative is only available in English.", "이 본문은 한국어로만 있습니다."),
    "incidents": ("Incidents", "사례"),
    "timeline": ("Timeline", "연대표"),
    "broader": ("Broader", "상위 개념"),
    "narrower": ("Narrower", "하위 개념"),
    "co_occurring": ("Often together with", "함께 나타나는 개념"),
    "organizations": ("Organizations", "조직"),
    "clusters_title": ("Root-cause clusters", "근본 원인 클러스터"),
    "clusters_intro": ("Incidents grouped by the components and causes they share; the map places similar incidents close together.",
                       "공유하는 구성 요소와 원인으로 사례를 묶었습니다. 지도에서는 비슷한 사례가 가까이 놓입니다."),
    "cluster_map": ("Cluster map", "클러스터 지도"),
    "quality": ("Agreement with cause labels", "원인 라벨과의 일치도"),
    "members": ("members", "개 사례"),
    "more_members": ("more: every member is in", "건 더: 모든 사례는 다음에 있습니다"),
    "map_sampled": ("{shown} of {total} incidents on the map (a sample keeping each cluster's share)",
                    "사고 {total}건 중 {shown}건을 지도에 표시 (클러스터별 비율을 유지한 표본)"),
    "review_title": ("Review queue", "검토 대기열"),
    "review_intro": ("Drafts from imports wait here until a reviewer publishes them.",
                     "가져오기로 들어온 초안이 검토자가 게시할 때까지 여기서 기다립니다."),
    "review_readonly": ("Reading is open to everyone. To publish, reject or review concepts, sign in with an editor token; "
                        "make one with",
                        "읽기는 누구나 할 수 있습니다. 게시·거절·개념 검토를 하려면 편집자 토큰으로 로그인하세요. 토큰 만들기:"),
    "sign_in": ("Sign in to review", "검토하려면 로그인"),
    "token_label": ("Editor token", "편집자 토큰"),
    "token_hint": ("Paste a token of role editor or admin. It is kept in a cookie for these pages only and never shown again.",
                   "editor 또는 admin 역할의 토큰을 붙여 넣으세요. 이 페이지들만을 위한 쿠키에 보관되며 다시 표시되지 않습니다."),
    "sign_in_button": ("Sign in", "로그인"),
    "sign_out_button": ("Sign out", "로그아웃"),
    "signed_in_as": ("Signed in as", "로그인한 검토자:"),
    "sign_in_bad": ("This token is not valid: it is unknown, revoked or expired.",
                    "유효하지 않은 토큰입니다. 모르는 토큰이거나, 폐기되었거나, 만료되었습니다."),
    "sign_in_role": ("This token may only read: reviewing needs a token of role editor or admin.",
                     "이 토큰은 읽기만 할 수 있습니다. 검토에는 editor 또는 admin 역할의 토큰이 필요합니다."),
    "sign_in_first": ("Sign in with an editor token first.", "먼저 편집자 토큰으로 로그인하세요."),
    "session_ended": ("Your sign-in no longer counts; sign in again.", "로그인이 더는 유효하지 않습니다. 다시 로그인하세요."),
    "csrf_refused": ("This form did not come from this page (missing or wrong form token); nothing was changed. Reload the page and try again.",
                     "이 양식은 이 페이지에서 온 것이 아닙니다(양식 토큰이 없거나 틀림). 아무것도 바뀌지 않았습니다. 페이지를 새로 고친 뒤 다시 하세요."),
    "stale": ("This draft was changed since you loaded the page; nothing was published. Look at the changes below and try again.",
              "페이지를 연 뒤에 이 초안이 바뀌었습니다. 게시하지 않았습니다. 아래 변경 내용을 보고 다시 하세요."),
    "stale_reject": ("This draft was changed since you loaded the page; nothing was rejected. Look at the changes below and "
                     "try again.",
                     "페이지를 연 뒤에 이 초안이 바뀌었습니다. 거절하지 않았습니다. 아래 변경 내용을 보고 다시 하세요."),
    "stale_concept": ("This draft was changed since you loaded the page; no concept was accepted or rejected. Look at the "
                      "changes below and try again.",
                      "페이지를 연 뒤에 이 초안이 바뀌었습니다. 개념을 받아들이거나 거절하지 않았습니다. 아래 변경 내용을 보고 다시 하세요."),
    "reviewed_already": ("Another reviewer has just published this draft; nothing was changed.",
                         "다른 검토자가 방금 이 초안을 게시했습니다. 아무것도 바뀌지 않았습니다."),
    "removed_already": ("This draft was just rejected or deleted by someone else; nothing was changed.",
                        "다른 사람이 방금 이 초안을 거절하거나 삭제했습니다. 아무것도 바뀌지 않았습니다."),
    "not_publishable": ("This draft does not meet the rules for published incidents yet; nothing was published:",
                        "이 초안은 아직 게시 규칙을 채우지 못했습니다. 게시하지 않았습니다:"),
    "write_refused": ("Nothing was changed:", "아무것도 바뀌지 않았습니다:"),
    "done_signed_in": ("Signed in.", "로그인했습니다."),
    "done_signed_out": ("Signed out.", "로그아웃했습니다."),
    "done_published": ("Published", "게시함:"),
    "done_rejected": ("Rejected", "거절함:"),
    "done_accepted": ("Concept accepted on", "개념을 받아들임:"),
    "done_concept_rejected": ("Concept rejected on", "개념을 거절함:"),
    "import_title": ("Import a collection", "모음 가져오기"),
    "import_intro": ("A postmortem archive or a ticket export (CSV, JSON, JSON Lines, YAML or a Markdown list), or one "
                     "postmortem document (format “document”), becomes drafts in the review queue. Preview first: "
                     "nothing is stored until you import, and then all or nothing.",
                     "포스트모템 모음이나 티켓 내보내기(CSV, JSON, JSON Lines, YAML, Markdown 목록), 또는 포스트모템 문서 "
                     "하나(형식 “document”)를 검토 대기열의 초안으로 "
                     "가져옵니다. 먼저 미리 보세요. 가져오기를 누르기 전에는 아무것도 저장하지 않고, 가져올 때는 전부 아니면 "
                     "아무것도 저장하지 않습니다."),
    "import_sign_in": ("Importing needs an editor's sign-in: sign in on the review page, then come back.",
                       "가져오기에는 편집자 로그인이 필요합니다. 검토 페이지에서 로그인한 뒤 돌아오세요:"),
    "import_file": ("File", "파일"),
    "import_paste": ("…or paste the text (after a preview, the file's text is here)",
                     "…또는 텍스트 붙여 넣기 (미리 보기 뒤에는 파일의 내용이 여기에 있습니다)"),
    "import_format": ("Format", "형식"),
    "import_format_auto": ("from the file name (csv for a paste)", "파일 이름에 따라 (붙여 넣기는 csv)"),
    "import_read_as": ("Read as {format}.", "{format} 형식으로 읽었습니다."),
    "import_read_as_named": ("Read as {format}, from the file name {name}; choose a Format if that is wrong.",
                             "파일 이름 {name}에 따라 {format} 형식으로 읽었습니다. 틀렸다면 형식을 고르세요."),
    "import_id_prefix": ("Id prefix", "ID 접두사"),
    "import_record_lang": ("Language of texts whose letters do not tell it", "글자로 알 수 없는 텍스트의 언어"),
    "import_date_format": ("Date form", "날짜 형식"),
    "import_maps": ("Field mapping, one FIELD=SOURCE a line", "필드 대응, 한 줄에 FIELD=SOURCE 하나"),
    "import_sets": ("Values for every record, one FIELD=VALUE a line ({path} from each record)",
                    "모든 기록에 넣을 값, 한 줄에 FIELD=VALUE 하나 (각 기록에서 {path})"),
    "import_opt_map": ("Field mapping", "필드 대응"),  # the fields' labels above, short, as messages name them
    "import_opt_set": ("Values for every record", "모든 기록에 넣을 값"),
    "import_help": ("The same import as `incidentlib import` and POST /import; docs/data-format.md has the details.",
                    "`incidentlib import`, POST /import와 같은 가져오기입니다. 자세한 내용은 docs/data-format.md에 있습니다."),
    "import_preview_button": ("Preview", "미리 보기"),
    "import_button": ("Import as drafts", "초안으로 가져오기"),
    "import_nothing": ("Choose a file or paste the collection's text.", "파일을 고르거나 모음의 텍스트를 붙여 넣으세요."),
    "import_previewed": ("Preview: nothing was stored", "미리 보기: 아무것도 저장하지 않았습니다"),
    "import_done": ("Imported", "가져왔습니다"),
    "import_none": ("Nothing was imported", "아무것도 가져오지 않았습니다"),
    "import_would_add": ("{accepted} record(s) would be added, {rejected} rejected.",
                         "기록 {accepted}건을 추가하고 {rejected}건을 거절하게 됩니다."),
    "import_added": ("{accepted} draft(s) added, {rejected} record(s) rejected.",
                     "초안 {accepted}건을 추가했고 기록 {rejected}건을 거절했습니다."),
    "import_to_review": ("Review them", "검토하러 가기"),
    "import_new_concepts": ("New organizations and tags", "새 조직과 태그"),
    "import_new_concepts_refused": ("Importing here will refuse these records: vocabulary is curated in git. Add the "
                                    "concepts to vocab/ there, or import on the command line, which adds them for review.",
                                    "여기서 가져오면 이 기록들은 거절됩니다. 어휘는 git에서 관리합니다. 그곳의 vocab/에 개념을 "
                                    "추가하거나, 검토용으로 개념을 추가하는 명령줄 가져오기를 쓰세요."),
    "import_keep_near": ("Keep records that only look like existing ones", "기존 기록과 비슷해 보이기만 하는 기록도 받기"),
    "import_accepted": ("Accepted", "받아들인 기록"),
    "import_rejected": ("Rejected", "거절한 기록"),
    "import_where": ("Where in the file", "파일의 위치"),
    "import_record": ("Record, and warnings", "기록과 경고"),
    "import_why": ("Why", "이유"),
    "draft": ("draft", "초안"),
    "filed_by": ("Filed by", "등록:"),
    "edits": ("Edits since it was filed", "등록 뒤 수정 내용"),
    "no_edits": ("No edits since it was filed.", "등록 뒤 수정한 내용이 없습니다."),
    "field": ("Field", "필드"),
    "before": ("Before", "이전"),
    "after": ("After", "이후"),
    "proposed": ("Proposed concepts (inferred)", "제안된 개념 (추론)"),
    "no_proposed": ("No proposed concepts.", "제안된 개념이 없습니다."),
    "accept": ("Accept", "받아들이기"),
    "reject_concept": ("Reject", "거절"),
    "publish": ("Publish", "게시"),
    "reject_draft": ("Reject draft", "초안 거절"),
    "method": ("method", "방법"),
    "no_drafts": ("No drafts are waiting.", "기다리는 초안이 없습니다."),
    "drafts_waiting": ("{total} draft(s) waiting; {first}–{last} on this page.",
                       "초안 {total}건이 기다립니다. 이 페이지에는 {first}–{last}번째가 있습니다."),
    "pages": ("Pages", "페이지"),
    "page_previous": ("Previous page", "이전 페이지"),
    "page_next": ("Next page", "다음 페이지"),
    "page_of": ("page {page} of {pages}", "{pages}쪽 중 {page}쪽"),
    "not_found": ("Not found", "찾을 수 없음"),
    "page_missing": ("There is no page at this address. Search, or start from the links above.",
                     "이 주소에는 페이지가 없습니다. 검색하거나 위의 링크에서 시작하세요."),
    "did_you_mean": ("Did you mean", "혹시 이것인가요"),
    "bad_request": ("Cannot run this request", "요청을 처리할 수 없음"),
    # before a message of the library, which is English, on a page in another language (error_lead); unused in English
    "error_lead": ("", "요청한 값을 쓸 수 없습니다. 자세한 이유는 아래에 영어로 적혀 있습니다."),
    "error_lead_field": ("", "‘{field}’ 값을 쓸 수 없습니다. 자세한 이유는 아래에 영어로 적혀 있습니다."),
    "error_lead_missing": ("", "찾는 것이 없습니다. 자세한 내용은 아래에 영어로 적혀 있습니다."),
    "field_query": ("Search words", "검색어"),
    "field_text": ("Pasted text", "붙여 넣은 텍스트"),
    "field_page": ("Page", "쪽"),
    "field_inferred": ("Inferred concepts", "추론된 개념"),
    "field_expected": ("Expected MFU", "기대 MFU"),
    "busy": ("Not ready yet: try again in a moment", "아직 준비 중입니다: 잠시 뒤 다시 시도하세요"),
    "topics_title": ("Topics", "주제"),
    "date_unknown": ("date unknown", "날짜 미상"),
    "api_link": ("JSON API", "JSON API"),
    "footer": ("Real, publicly documented incidents with sources. The JSON API is described at /docs, where each "
               "request can be tried, and by its OpenAPI document, /openapi.json (both work offline).",
               "출처가 있는 실제 공개 장애 사례입니다. JSON API는 /docs에 설명되어 있어 요청마다 직접 보내 볼 수 있고, "
               "OpenAPI 문서 /openapi.json에도 있습니다(둘 다 오프라인에서도 열림)."),
}


#: The label (a key above) of the field each parameter of a refused request is written in on the pages.
FIELD_LABELS = {"q": "field_query", "query": "field_query", "text": "field_text", "page": "field_page", "org": "org",
                "component": "component", "cause": "cause", "symptom": "symptom", "tag": "tag", "year": "year",
                "year_from": "year", "year_to": "year", "severity": "severity", "inferred": "field_inferred",
                "file": "import_file", "expected": "field_expected", "format": "import_format",
                "date_format": "import_date_format", "maps": "import_opt_map", "sets": "import_opt_set",
                "keep_near_duplicates": "import_keep_near"}
#: The library's messages about one parameter begin with its name: ``year: '20x' is not a year``.
_LEADING_PARAMETER = re.compile(r"([a-z_]+): ")


def error_lead(lang: str, message: str, parameter: str | None = None, missing: bool = False) -> str | None:
    """What to say in the page's language before a message of the library, which is written in English: which field
    of the page the message is about (``parameter``, else the name the message begins with), or that something asked
    for is not there (``missing``, a 404).  None on an English page, where the message says it all."""
    if lang != "ko":
        return None
    t = texts(lang)
    if missing:
        return t["error_lead_missing"]
    found = _LEADING_PARAMETER.match(message)
    label = FIELD_LABELS.get(parameter or (found.group(1) if found else ""))
    return t["error_lead_field"].format(field=t[label]) if label else t["error_lead"]


def texts(lang: str) -> Mapping[str, str]:
    """The page labels in ``lang`` (``ko`` or ``en``)."""
    index = 1 if lang == "ko" else 0
    return {key: pair[index] for key, pair in _TEXT.items()}
