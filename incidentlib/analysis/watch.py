"""Watch a log stream (dmesg, NCCL, kubelet) and answer each distinct problem once.

A line is a *problem* when a signal family recognises it; its key is ``family:code``.
Rate limit: a key answered less than ``REPEAT_WINDOW_S`` ago is counted, not answered
again, and at most ``MAX_ANSWERS_PER_WINDOW`` distinct problems are answered per
``REPEAT_WINDOW_S`` (the rest are counted under ``overflow``), so one flood — every rank
printing the same NCCL watchdog line, or an Xid storm on one node — produces one answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..views import WatchAnswer
from .alerts import answer_text

if TYPE_CHECKING:
    from ..library import Library

# PyTorch's default NCCL timeout is ten minutes (the IL-0025 watchdog line shows Timeout(ms)=600000):
# the per-rank lines of one hang arrive within that, so a repeat inside ten minutes is the same event.
REPEAT_WINDOW_S = 600.0
# A node falling apart can print several kinds of error at once; five answers are readable, more is noise.
MAX_ANSWERS_PER_WINDOW = 5
# Lines longer than this are cut before matching (kernel and NCCL lines are far shorter).
MAX_LINE_CHARS = 4000


@dataclass
class RateLimiter:
    """Decides whether a problem key gets an answer now (see the module docstring)."""

    clock: Callable[[], float] = time.monotonic
    window_s: float = REPEAT_WINDOW_S
    max_answers: int = MAX_ANSWERS_PER_WINDOW
    last: dict[str, float] = field(default_factory=dict)
    recent: list[float] = field(default_factory=list)
    suppressed: dict[str, int] = field(default_factory=dict)

    def allow(self, key: str) -> bool:
        now = self.clock()
        self.recent = [t for t in self.recent if now - t < self.window_s]
        seen = self.last.get(key)
        if seen is not None and now - seen < self.window_s:
            self.suppressed[key] = self.suppressed.get(key, 0) + 1
            return False
        if len(self.recent) >= self.max_answers:
            self.suppressed["overflow"] = self.suppressed.get("overflow", 0) + 1
            return False
        self.last[key] = now
        self.recent.append(now)
        return True


def watch(library: Library, lines: Iterable[str], lang: str, limit: int, limiter: RateLimiter | None = None) -> Iterator[WatchAnswer]:
    limiter = limiter or RateLimiter()
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")[:MAX_LINE_CHARS]
        if not line.strip():
            continue
        signals = library.explain_signals(line, lang=lang)
        if not signals:
            continue
        key = f"{signals[0].family}:{signals[0].code}"
        if not limiter.allow(key):
            continue
        answer = answer_text(library, key, "firing", {}, line, lang, limit)
        yield WatchAnswer(key=key, line=line, line_number=number, answer=answer)
