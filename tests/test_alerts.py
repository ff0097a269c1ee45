"""Error-signal families, alerts in (Alertmanager and generic JSON) and the rate-limited log watcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from incidentlib import Library
from incidentlib.errors import AlertError, TableError

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(("line", "family", "code", "symptom"), [
    ("kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "xid", "79", "gpu-fell-off-bus"),
    ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.", "xid", "63", "ecc-errors"),
    ("NVRM: Xid (PCI:0000:ca:00): 48, pid=77, DBE (double bit error) ECC error", "xid", "48", "ecc-errors"),
    ("NVRM: Xid (PCI:0000:07:00): 13, Graphics Exception: ESR 0x50", "xid", "13", "xid-errors"),
    ("nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error", "sxid", "non-fatal", "link-flapping"),
    ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000)", "nccl-watchdog", "allreduce", "collective-timeout"),
    ("NET/IB : Got completion from peer 10.1.2.3<41234> with error 12, opcode 0, len 0, vendor err 129", "ib-completion", "IBV_WC_RETRY_EXC_ERR", "link-flapping"),
    ("ibv_poll_cq failed: status IBV_WC_WR_FLUSH_ERR", "ib-completion", "IBV_WC_WR_FLUSH_ERR", "link-flapping"),
    ("pci 0000:1b:00.0: limited width: x4 < x16", "pcie", "width", "link-degradation"),
    ("pcieport 0000:00:01.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)", "pcie", "corrected", "link-degradation"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "ecc", "uncorrectable", "ecc-errors"),
    ("Warning  BackOff  pod/trainer-0  Back-off restarting failed container", "k8s-event", "BackOff", "job-failure"),
    ("Warning  OOMKilling  node/gpu-3  Memory cgroup out of memory: Killed process 4242 (python)", "k8s-event", "OOMKilled", "job-failure"),
    ("torch.distributed.DistBackendError: NCCL error: remote process exited or there was a network error, ncclRemoteError", "nccl-error", "ncclRemoteError", "job-failure"),
])
def test_signal_families_recognise_real_log_lines(library: Library, line: str, family: str, code: str, symptom: str) -> None:
    found = library.explain_signals(line)
    match = next(m for m in found if m.family == family)
    assert match.code == code and match.known
    assert symptom in {s.id for s in match.symptoms}
    assert match.meaning and match.excerpt
    korean = next(m for m in library.explain_signals(line, lang="ko") if m.family == family)
    assert korean.meaning != match.meaning and any("\uac00" <= ch <= "\ud7a3" for ch in korean.meaning)


def test_unknown_code_gets_the_family_default(library: Library) -> None:
    [match] = library.explain_signals("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed")
    assert match.code == "154" and not match.known and "154" in match.meaning


def test_one_match_per_family_and_code(library: Library) -> None:
    flood = "\n".join(f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=_ALLGATHER_BASE)"
                      for r in range(64))
    assert [(m.family, m.code) for m in library.explain_signals(flood)] == [("nccl-watchdog", "_allgather_base")]


def test_signal_table_errors_name_the_field(library_copy: Path) -> None:
    table = library_copy / "diagnosis" / "signals.yaml"
    doc = yaml.safe_load(table.read_text(encoding="utf-8"))
    doc["families"][0]["patterns"].append({"regex": "Xid ("})
    doc["families"][0]["codes"][0]["causes"] = ["hardware-faul"]
    table.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    with pytest.raises(TableError, match=r"families\.0\.patterns\.3\.regex: not a valid regular expression"):
        _ = Library.open(library_copy).signal_table
    doc["families"][0]["patterns"].pop()
    table.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    with pytest.raises(TableError, match="unknown cause 'hardware-faul'"):
        _ = Library.open(library_copy).signal_table


def test_diagnose_text_lists_explained_signals(search_library: Library) -> None:
    result = search_library.diagnose(text="NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.")
    assert [(m.family, m.code) for m in result.explained] == [("xid", "79")]


def test_alertmanager_payload_answers_each_firing_alert(search_library: Library) -> None:
    payload = json.loads((FIXTURES / "alertmanager-xid79.json").read_text(encoding="utf-8"))
    answer = search_library.answer_alerts(payload)
    assert answer.receiver == "incidentlib" and answer.answered == 1 and answer.skipped == ["GPUXidError"]
    [alert] = answer.alerts
    assert alert.signals[0].family == "xid" and alert.signals[0].code == "79"
    ids = [i.id for i in alert.incidents]
    fell_off = {"IL-0027", "IL-0028", "IL-0041", "IL-0043", "IL-0044"}  # incidents tagged gpu-fell-off-bus
    assert ids[0] in fell_off and len(fell_off & set(ids)) >= 2
    assert alert.markdown.startswith("**[FIRING] GPUXidError** on `gpu-node-03:9400`")
    assert "Xid error 79" in alert.markdown and ids[0] in alert.markdown


def test_generic_alert_and_korean_markdown(search_library: Library) -> None:
    answer = search_library.answer_alerts(
        {"title": "Trainer hung", "message": "NET/IB : Got completion from peer 10.0.0.2<1> with error 12"}, lang="ko")
    [alert] = answer.alerts
    assert alert.alertname == "Trainer hung" and alert.signals[0].code == "IBV_WC_RETRY_EXC_ERR"
    assert "**신호:**" in alert.markdown and "**비슷한 사례:**" in alert.markdown


@pytest.mark.parametrize(("payload", "message"), [
    ([], "body: must be a JSON object"),
    ({"version": "3", "alerts": [{}]}, "version: Alertmanager webhook version '3' is not supported"),
    ({"version": "4", "alerts": []}, "alerts: must be a non-empty list"),
    ({"version": "4", "alerts": [{"labels": "x"}]}, r"alerts\[0\].labels: must be an object"),
    ({"severity": 3}, "an alert needs labels, annotations"),
])
def test_bad_alerts_name_the_field(library: Library, payload: object, message: str) -> None:
    with pytest.raises(AlertError, match=message):
        library.answer_alerts(payload)


def test_watch_answers_a_flood_once_and_again_after_the_window(search_library: Library) -> None:
    lines = (FIXTURES / "flood.log").read_text(encoding="utf-8").splitlines()
    now = [0.0]
    suppressed: dict[str, int] = {}
    answers = list(search_library.watch(lines, clock=lambda: now[0], suppressed=suppressed))
    assert [a.key for a in answers] == ["nccl-watchdog:_allgather_base", "xid:79", "ib-completion:IBV_WC_RETRY_EXC_ERR"]
    assert suppressed["nccl-watchdog:_allgather_base"] == 255 and suppressed["xid:79"] == 1
    assert answers[1].answer.incidents and answers[1].line_number > 1
    # the same flood after the window has passed is a new event
    from incidentlib.analysis.watch import REPEAT_WINDOW_S

    def later() -> float:
        return REPEAT_WINDOW_S + 1.0

    again = search_library.watch(lines[:3], clock=later)
    assert [a.key for a in again] == ["nccl-watchdog:_allgather_base"]


def test_watch_caps_distinct_problems_per_window(search_library: Library) -> None:
    from incidentlib.analysis.watch import MAX_ANSWERS_PER_WINDOW

    lines = [f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=1" for code in (13, 31, 43, 45, 48, 61, 62, 63)]
    suppressed: dict[str, int] = {}
    answers = list(search_library.watch(lines, clock=lambda: 0.0, suppressed=suppressed))
    assert len(answers) == MAX_ANSWERS_PER_WINDOW
    assert suppressed["overflow"] == len(lines) - MAX_ANSWERS_PER_WINDOW
