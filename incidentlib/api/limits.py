"""The service's tunable limits, in a module that imports nothing: the CLI shows them as option defaults
without loading Starlette or the SPARQL runner (a search from the shell starts faster)."""

from __future__ import annotations

# The request line and headers: a 20,000-character SPARQL query of 4-byte characters,
# percent-encoded in a GET URL, is 240 KB; past this the HTTP server answers 400 itself.
MAX_REQUEST_HEAD_BYTES = 512 * 1024
# Per client: a person or an agent rarely sends more than a few searches a second;
# 10/s sustained with bursts of 30 serves interactive use and stops a single client
# from taking every worker.
DEFAULT_RATE_PER_SECOND = 10.0
DEFAULT_RATE_BURST = 30
# Heavy routes mix numpy/FAISS (releases the GIL) and Python (holds it): on a
# 2-core server 4 running at once keeps both cores busy without thrashing.
DEFAULT_HEAVY_WORKERS = 4
# At most this many wait for a worker; at ~50 ms per search the last one waits
# about half a second.  Beyond that a fast 503 is more useful than a slow answer.
DEFAULT_HEAVY_QUEUE = 32
# Each SPARQL query is one CPU-bound process; more than two at once on a small server
# only makes every one of them slower.
DEFAULT_MAX_CONCURRENT = 2
