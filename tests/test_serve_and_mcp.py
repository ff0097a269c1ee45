"""End to end: `incidentlib serve` as a real process, and real MCP client sessions (stdio and HTTP)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from _server import wait_for_tagger
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from incidentlib.requests import MAX_QUERY_CHARS, MAX_SIMILAR_TEXT_CHARS

pytestmark = pytest.mark.slow  # servers, subprocesses and wheel builds

TOOLS = {"search_incidents", "get_incident", "list_incidents", "get_topic", "vocab", "similar_incidents", "related_incidents",
         "list_clusters", "diagnose", "diagnose_series", "cited_passages"}
FIXTURES = Path(__file__).parent / "fixtures"


def _thermal_points() -> list[dict[str, float | int]]:
    """30 minutes of MFU at 98% dipping to 70% for 4 s every 15 s, with the HwThermalSlowdown bit (0x40) set."""
    return [{"seconds": float(s), "mfu": 0.7 if s % 15 < 4 else 0.98, "throttle": 0x40 if s % 15 < 4 else 0}
            for s in range(0, 1800)]


def executable() -> str:
    exe = shutil.which("incidentlib", path=str(Path(sys.executable).parent))
    assert exe, "the incidentlib console script is not installed next to this interpreter"
    return exe


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(search_library, data_dir: Path, cache_dir: Path):
    """A real `incidentlib serve` process on a free loopback port (the index is already cached)."""
    port = free_port()
    process = subprocess.Popen(
        [executable(), "serve", "--port", str(port), "--data", str(data_dir), "--cache", str(cache_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"serve exited early:\n{process.stdout.read() if process.stdout else ''}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("serve did not become healthy within 180 s")
            time.sleep(0.5)
        wait_for_tagger(base)  # the MCP tools paste text, answered 503 until the tagger is ready
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def test_real_server_answers_over_http(server: str, search_library) -> None:
    health = httpx.get(f"{server}/health", timeout=10).json()
    assert health["status"] == "ok" and health["incidents"] == len(search_library)
    found = httpx.get(f"{server}/search", params={"q": "NCCL 워치독 타임아웃", "k": 3}, timeout=30).json()
    assert found["results"] and found["results"][0]["why"]["chunk"]["text"]
    detail = httpx.get(f"{server}/incidents/IL-0025", params={"lang": "ko"}, timeout=10).json()
    assert detail["id"] == "IL-0025" and detail["lang"] == "ko"
    assert httpx.get(f"{server}/incidents/IL-9999", timeout=10).status_code == 404


#: A log excerpt past MAX_QUERY_CHARS: the same watchdog line from many ranks, as a job's log repeats it.
LONG_LOG = "\n".join(f"[rank{rank}]:[E ProcessGroupNCCL.cpp:563] Watchdog caught collective operation timeout: "
                     f"WorkNCCL(SeqNum={408951 + rank}, OpType=_ALLGATHER_BASE, Timeout(ms)=600000)" for rank in range(24))


def _check_tools(client_factory) -> dict[str, object]:
    results: dict[str, object] = {}

    async def session() -> None:
        async with client_factory() as client:
            listed = await client.list_tools()
            names = {tool.name for tool in listed.tools}
            results["names"] = names
            results["schemas"] = {tool.name: tool.input_schema for tool in listed.tools}
            calls = {
                "search_incidents": {"query": "S3 명령 오타 장애", "k": 3},
                "cited_passages": {"query": "S3 명령 오타 장애", "k": 2, "lang": "ko"},
                "get_incident": {"incident_id": "IL-0025", "lang": "ko"},
                "list_incidents": {"component": "nccl", "limit": 5},
                "get_topic": {"topic": "InfiniBand"},
                "vocab": {"kind": "cause"},
                "similar_incidents": {"text": "Watchdog caught collective operation timeout: WorkNCCL(OpType=_ALLGATHER_BASE)", "k": 3},
                "related_incidents": {"incident_id": "IL-0025", "limit": 50},
                "list_clusters": {"method": "graph"},
                "diagnose": {"text": "MFU drops to 70% every 15 seconds"},
                "diagnose_series": {"points": _thermal_points(), "lang": "ko"},
            }
            for name, arguments in calls.items():
                results[name] = await client.call_tool(name, arguments)
            results["error"] = await client.call_tool("get_incident", {"incident_id": "IL-9999"})
            # a pasted log longer than a search query: similar's own limit applies
            results["long_log"] = await client.call_tool("similar_incidents", {"text": LONG_LOG, "k": 3})

    anyio.run(session)
    return results


def _assert_tool_results(results: dict[str, object]) -> None:
    assert results["names"] >= TOOLS  # type: ignore[operator]
    schemas = results["schemas"]
    assert "query" in schemas["search_incidents"]["properties"]  # type: ignore[index]
    for name in TOOLS:
        result = results[name]
        assert not result.is_error, (name, result.content)  # type: ignore[attr-defined]
        text = result.content[0].text  # type: ignore[attr-defined]
        assert result.structured_content, name  # type: ignore[attr-defined]
        if name not in ("vocab", "get_topic", "list_clusters"):
            assert "IL-" in text, (name, text)
    assert "IL-0076" in results["search_incidents"].content[0].text  # type: ignore[attr-defined]
    cited = results["cited_passages"].structured_content["passages"]  # type: ignore[attr-defined]
    assert cited and cited[0]["incident_id"] == "IL-0076" and cited[0]["source_urls"] and cited[0]["lang"] in ("ko", "raw")
    assert cited[0]["source_urls"][0] in results["cited_passages"].content[0].text  # type: ignore[attr-defined]
    assert results["get_incident"].structured_content["lang"] == "ko"  # type: ignore[attr-defined]
    related = {item["id"] for item in results["related_incidents"].structured_content["items"]}  # type: ignore[attr-defined]
    assert {"IL-0126", "IL-0133", "IL-0134", "IL-0021"} <= related
    assert "IL-0025" in [r["id"] for r in results["similar_incidents"].structured_content["results"][:3]]  # type: ignore[attr-defined]
    series = results["diagnose_series"].structured_content  # type: ignore[attr-defined]
    assert series["shape"] == "thermal-throttle" and series["incidents"][0]["id"] == "IL-0025"
    assert series["features"]["throttle_overlap"] == 1.0
    assert "좋다가 주기적으로" in results["diagnose_series"].content[0].text  # type: ignore[attr-defined]
    error = results["error"]
    assert error.is_error and "IL-9999" in error.content[0].text  # type: ignore[attr-defined]
    assert len(LONG_LOG) > MAX_QUERY_CHARS and not results["long_log"].is_error  # type: ignore[attr-defined]
    assert "IL-0025" in [r["id"] for r in results["long_log"].structured_content["results"]]  # type: ignore[attr-defined]
    assert f'"maxLength": {MAX_SIMILAR_TEXT_CHARS}' in json.dumps(schemas["similar_incidents"]["properties"]["text"])  # type: ignore[index]
    assert f'"maxLength": {MAX_QUERY_CHARS}' in json.dumps(schemas["search_incidents"]["properties"]["query"])  # type: ignore[index]


def test_mcp_over_stdio(search_library, data_dir: Path, cache_dir: Path) -> None:
    params = StdioServerParameters(
        command=executable(), args=["mcp", "--data", str(data_dir), "--cache", str(cache_dir)],
        # PYTHONPATH (when set) keeps the server on the code under test rather than another install
        env={"PATH": os.environ.get("PATH", ""), **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}},
    )
    _assert_tool_results(_check_tools(lambda: Client(params, read_timeout_seconds=120)))


def test_mcp_over_streamable_http(server: str) -> None:
    _assert_tool_results(_check_tools(lambda: Client(f"{server}/mcp", read_timeout_seconds=120)))


def test_serve_json_shapes_match_cli(server: str) -> None:
    over_http = httpx.get(f"{server}/incidents/IL-0025/related", params={"limit": 5}, timeout=10).json()["items"]
    proc = subprocess.run([executable(), "related", "IL-0025", "--json", "--limit", "5"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == over_http


def test_real_server_answers_alertmanager_webhooks(server: str) -> None:
    nccl = json.loads((FIXTURES / "alertmanager-nccl-timeout.json").read_text(encoding="utf-8"))
    response = httpx.post(f"{server}/alerts/alertmanager", json=nccl, timeout=60)
    assert response.status_code == 200, response.text
    [alert] = response.json()["alerts"]
    assert alert["signals"][0]["family"] == "nccl-watchdog" and alert["signals"][0]["code"] == "_allgather_base"
    assert "IL-0025" in [i["id"] for i in alert["incidents"][:3]]
    assert all(any(c["id"] == "nccl" for c in i["shared"]) for i in alert["incidents"][:3])  # NCCL collective timeouts
    assert "IL-0025" in alert["markdown"] and alert["markdown"].startswith("**[FIRING] NCCLWatchdogTimeout**")

    xid = json.loads((FIXTURES / "alertmanager-xid79.json").read_text(encoding="utf-8"))
    body = httpx.post(f"{server}/alerts/alertmanager", params={"lang": "ko"}, json=xid, timeout=60).json()
    assert body["answered"] == 1 and body["skipped"] == ["GPUXidError"]  # the resolved one is not diagnosed
    [alert] = body["alerts"]
    assert alert["signals"][0]["code"] == "79"
    assert any(c["id"] == "gpu-fell-off-bus" for c in alert["incidents"][0]["shared"])  # an incident where the GPU fell off the bus
    assert "**신호:**" in alert["markdown"]

    bad = httpx.post(f"{server}/alerts/alertmanager", json={"version": "3", "alerts": [{}]}, timeout=30)
    assert bad.status_code == 422 and "version" in json.dumps(bad.json()["detail"])


def test_real_server_diagnoses_a_series(server: str) -> None:
    csv = "seconds,mfu,throttle\n" + "".join(f"{p['seconds']},{p['mfu']},{p['throttle']}\n" for p in _thermal_points())
    body = httpx.post(f"{server}/diagnose/series", json={"text": csv}, timeout=60).json()
    assert body["shape"] == "thermal-throttle" and body["features"]["dip_period_s"] == pytest.approx(15, abs=1)
    short = httpx.post(f"{server}/diagnose/series", json={"points": [{"seconds": 0, "mfu": 0.9}]}, timeout=30).json()
    assert short["shape"] is None and "too few usable points" in short["cannot_tell"]
    for payload, where in (({"text": "a,b\n1,2\n"}, "needs a time column"), ({"points": [{"seconds": 0, "mfu": 90}] * 40}, "absolute"),
                           ({}, "exactly one of points or text")):
        response = httpx.post(f"{server}/diagnose/series", json=payload, timeout=30)
        assert response.status_code == 422 and where in response.text
