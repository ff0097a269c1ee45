"""Tokenizing on several cores (``token_workers``) gives what one process gives, and survives a failed worker.

The workers are real interpreters running the module's worker program, fed through pipes.
"""

from __future__ import annotations

import logging
import sys
import time

import numpy as np
import pytest
from test_tokenize_bulk import EDGE_CASES, random_texts

from incidentlib.search import lexical, token_workers
from incidentlib.search import tokenize as tokenize_module
from incidentlib.search.tokenize import tokenize_many

FIELDS = ("vocabulary", "indptr", "indices", "data", "tf", "lengths")


def _tokens(texts: list[str], workers: int) -> tuple[list[list[str]], list[str]]:
    """Each text's tokens as strings, and the terms in the order ``term_id`` numbered them."""
    terms: dict[str, int] = {}
    ids, lengths = token_workers.token_ids(texts, lambda term: terms.setdefault(term, len(terms)), workers=workers, min_texts=0)
    assert ids.dtype == np.int32 and len(lengths) == len(texts) and int(lengths.sum()) == len(ids)
    names = np.array(list(terms) or [""], dtype=object)[ids]
    return [part.tolist() for part in np.split(names, np.cumsum(lengths)[:-1])], list(terms)


def test_shares_tokenized_by_workers_equal_one_process() -> None:
    texts = [*EDGE_CASES, *random_texts(2000, seed=11), *EDGE_CASES]
    alone, _ = _tokens(texts, workers=0)
    for workers in (1, 2):
        split, terms = _tokens(texts, workers=workers)
        assert split == alone
        assert len(set(terms)) == len(terms)  # every term numbered once, whichever process met it first
    assert alone == tokenize_many(texts)  # workers=0 is the plain bulk path


def test_texts_sent_a_batch_at_a_time_equal_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The texts go to a worker in batches of ``TOKEN_BATCH`` (here 7, so a share is many batches and the last one
    short); the stream tokenizer gives what the whole-list one gives, batch sizes notwithstanding."""
    texts = [*EDGE_CASES, *random_texts(500, seed=12)]
    alone, _ = _tokens(texts, workers=0)
    monkeypatch.setattr(tokenize_module, "TOKEN_BATCH", 7)
    split, _ = _tokens(texts, workers=2)
    assert split == alone
    terms: dict[str, int] = {}
    batches = [texts[i:i + 13] for i in range(0, len(texts), 13)]
    streamed, lengths = tokenize_module.token_id_stream(iter(batches), lambda term: terms.setdefault(term, len(terms)))
    names = np.array(list(terms), dtype=object)[np.concatenate(streamed)]
    assert [part.tolist() for part in np.split(names, np.cumsum(lengths)[:-1])] == alone
    assert len(streamed) == len(batches)


def test_a_worker_that_reads_nothing_costs_time_not_the_result(monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A worker that exits before reading its texts: the thread writing them stops (its pipe is closed) and the
    share is tokenized here; no thread is left writing."""
    texts = random_texts(3000, seed=17)  # more than a pipe holds, so the writer is still writing when the worker exits
    alone, _ = _tokens(texts, workers=0)
    monkeypatch.setattr(token_workers, "_WORKER", "import sys\nsys.exit(5)\n")
    started: list[token_workers._Worker | None] = []
    real_start = token_workers._start
    monkeypatch.setattr(token_workers, "_start",
                        lambda share, claims=None: started.append(real_start(share, claims)) or started[-1])
    with caplog.at_level(logging.WARNING, logger=token_workers.__name__):
        split, _ = _tokens(texts, workers=1)
    assert split == alone
    assert [record.getMessage().count("exit status 5") for record in caplog.records] == [1]
    assert len(started) == 1 and started[0] is not None and not started[0].feeder.is_alive()


def test_postings_built_with_workers_equal_postings_built_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = random_texts(1500, seed=12)
    monkeypatch.setenv(token_workers.WORKERS_ENV, "0")
    alone = lexical.build_postings(texts)
    monkeypatch.setenv(token_workers.WORKERS_ENV, "2")
    monkeypatch.setattr(token_workers, "PARALLEL_MIN_TEXTS", 100)
    split = lexical.build_postings(texts)
    for name in FIELDS:
        assert np.array_equal(np.asarray(getattr(alone, name)), np.asarray(getattr(split, name))), name


@pytest.mark.parametrize("executable", ["/bin/false", "/nonexistent/python", ""])
def test_a_failed_worker_costs_time_not_the_result(executable: str, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    texts = random_texts(600, seed=13)
    alone, _ = _tokens(texts, workers=0)
    monkeypatch.setattr(sys, "executable", executable)  # the worker exits with status 1, cannot start, or is unknown
    with caplog.at_level(logging.WARNING, logger=token_workers.__name__):
        split, _ = _tokens(texts, workers=1)
    assert split == alone
    assert any("tokenizing its" in record.getMessage() for record in caplog.records)


def test_small_batches_stay_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    monkeypatch.setattr(token_workers, "_start", lambda share, claims=None: started.append(len(share)))
    terms: dict[str, int] = {}
    token_workers.token_ids(["GPU 장애가 났다"] * 10, lambda term: terms.setdefault(term, len(terms)), workers=2)
    assert started == []  # below PARALLEL_MIN_TEXTS


def test_the_worker_count_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(token_workers.WORKERS_ENV, "3")
    assert token_workers.default_workers() == 3
    monkeypatch.setenv(token_workers.WORKERS_ENV, "0")
    assert token_workers.default_workers() == 0
    for bad in ("two", "-1"):
        monkeypatch.setenv(token_workers.WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=token_workers.WORKERS_ENV):
            token_workers.default_workers()
    monkeypatch.delenv(token_workers.WORKERS_ENV)
    assert 0 <= token_workers.default_workers() <= token_workers.MAX_WORKERS


def test_an_interrupted_build_leaves_no_worker_running(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[token_workers._Worker | None] = []
    real_start = token_workers._start

    def start(share: list[str], claims: token_workers._Claims | None = None) -> token_workers._Worker | None:
        started.append(real_start(share, claims))
        return started[-1]

    def interrupted(batches: object, term_id: object) -> None:
        raise RuntimeError("interrupted while tokenizing the first share")

    monkeypatch.setattr(token_workers, "_start", start)
    monkeypatch.setattr(tokenize_module, "token_id_stream", interrupted)  # this process only: the worker loads its own
    terms: dict[str, int] = {}
    with pytest.raises(RuntimeError, match="interrupted"):
        token_workers.token_ids(random_texts(300, seed=14), lambda term: terms.setdefault(term, len(terms)), workers=2,
                                min_texts=0)
    assert len(started) == 2 and all(worker is not None and worker.process.poll() is not None
                                     and not worker.feeder.is_alive() for worker in started)


def test_relabelling_in_place_block_by_block_equals_one_look_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Token ids relabelled in blocks (the building process's way, with no second array of every id) equal one
    table look-up, and the array given is the one relabelled."""

    monkeypatch.setattr(token_workers, "RELABEL_BLOCK", 7)
    rng = np.random.default_rng(3)
    table = rng.permutation(50).astype(np.int32)
    ids = rng.integers(0, 50, 103).astype(np.int32)
    expected = table[ids]
    assert token_workers.relabel_in_place(ids, table) is ids
    assert ids.tolist() == expected.tolist()


def _worker_program(before_answer: str = "", after_header: str = "") -> str:
    """The module's worker program with code run before it answers, or after its header (and half of its ids)."""
    program = token_workers._WORKER
    program = program.replace("out = sys.stdout.buffer\n", f"{before_answer}\nout = sys.stdout.buffer\n")
    if after_header:
        program = program.replace("for batch in ids:\n    out.write(memoryview(batch).cast(\"B\"))\n",
                                  "raw = b''.join(memoryview(b).cast('B').tobytes() for b in ids)\n"
                                  f"out.write(raw[:len(raw) // 2])\nout.flush()\n{after_header}\n")
    assert program != token_workers._WORKER
    return program


def test_a_worker_that_stops_after_its_header_costs_time_not_the_result(monkeypatch: pytest.MonkeyPatch,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The ids a worker announced but did not send are made here, in their place."""
    texts = random_texts(600, seed=15)
    alone, _ = _tokens(texts, workers=0)
    monkeypatch.setattr(token_workers, "_WORKER", _worker_program(after_header="sys.exit(3)"))
    with caplog.at_level(logging.WARNING, logger=token_workers.__name__):
        split, _ = _tokens(texts, workers=2)
    assert split == alone
    failures = [record.getMessage() for record in caplog.records if "tokenizing its" in record.getMessage()]
    assert len(failures) == 2 and all("exit status 3" in message for message in failures)


def test_a_worker_with_many_messages_does_not_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker writing more to its error stream than a pipe holds (64 KB) before it answers still answers."""
    texts = random_texts(600, seed=16)
    alone, _ = _tokens(texts, workers=0)
    monkeypatch.setattr(token_workers, "_WORKER", _worker_program(before_answer="sys.stderr.write('w' * 300_000)"))
    split, _ = _tokens(texts, workers=1)
    assert split == alone


def test_claims_hand_out_every_batch_once_from_both_ends() -> None:
    claims = token_workers._Claims(5)
    taken = [claims.from_front(), claims.from_back(), claims.from_front(), claims.from_back(), claims.from_back()]
    assert taken == [0, 4, 1, 3, 2] and claims.from_front() is None and claims.from_back() is None
    assert claims.front == 2  # the worker's share is batches 0 and 1
    closed = token_workers._Claims(4)
    assert closed.from_front() == 0
    closed.close()
    assert closed.from_back() is None and closed.from_front() is None and closed.front == 1


def test_both_ends_of_the_shared_texts_are_taken_and_equal_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first worker's feeder and this process take batches of the shared texts from both ends; whichever share
    each ends with, the ids are those of one process, in order."""
    texts = random_texts(3000, seed=21)
    alone, _ = _tokens(texts, workers=0)
    monkeypatch.setattr(tokenize_module, "TOKEN_BATCH", 7)
    terms: dict[str, int] = {}
    tokenizing = token_workers.Tokenizing(texts, workers=1, min_texts=0)
    ids, lengths = tokenizing.ids(lambda term: terms.setdefault(term, len(terms)))
    names = np.array(list(terms), dtype=object)[ids]
    assert [part.tolist() for part in np.split(names, np.cumsum(lengths)[:-1])] == alone
    batches = -(-len(texts) // 7)
    assert 0 < tokenizing.claims.front < batches  # the worker took the front, this process the rest


def test_a_worker_started_early_takes_more_of_the_shared_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Started before this process is free (a build in segments counting the last segment's pairs), the worker has
    a head start: it is fed batches until this process begins, so it ends with more than half."""
    texts = random_texts(4000, seed=22)
    alone, _ = _tokens(texts, workers=0)
    monkeypatch.setattr(tokenize_module, "TOKEN_BATCH", 50)
    tokenizing = token_workers.Tokenizing(texts, workers=1, min_texts=0)
    batches = -(-len(texts) // 50)
    deadline = time.monotonic() + 60
    while tokenizing.claims.front < batches * 3 // 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    terms: dict[str, int] = {}
    ids, lengths = tokenizing.ids(lambda term: terms.setdefault(term, len(terms)))
    names = np.array(list(terms), dtype=object)[ids]
    assert [part.tolist() for part in np.split(names, np.cumsum(lengths)[:-1])] == alone
    assert tokenizing.claims.front >= batches * 3 // 4


def test_a_discarded_tokenizing_stops_its_workers() -> None:
    tokenizing = token_workers.Tokenizing(random_texts(300, seed=23), workers=2, min_texts=0)
    tokenizing.discard()
    assert len(tokenizing.started) == 2
    assert all(w is not None and w.process.poll() is not None and not w.feeder.is_alive() for w in tokenizing.started)


def test_a_feeder_that_cannot_start_leaves_no_process_and_costs_time_not_the_result(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    texts = random_texts(600, seed=24)
    alone, _ = _tokens(texts, workers=0)
    spawned: list[object] = []
    real_popen = token_workers.subprocess.Popen

    def popen(*args: object, **kwargs: object) -> object:
        spawned.append(real_popen(*args, **kwargs))  # type: ignore[call-overload]
        return spawned[-1]

    def no_thread(self: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(token_workers.subprocess, "Popen", popen)
    monkeypatch.setattr(token_workers.threading.Thread, "start", no_thread)
    with caplog.at_level(logging.WARNING, logger=token_workers.__name__):
        split, _ = _tokens(texts, workers=2)
    assert split == alone
    assert len(spawned) == 2 and all(process.poll() is not None for process in spawned)  # type: ignore[attr-defined]
    assert sum("could not start a thread" in record.getMessage() for record in caplog.records) == 2
