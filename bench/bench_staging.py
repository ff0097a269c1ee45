"""Files staged for a commit and flushed to disk (``storage.write_durably``): one ``syncfs`` of the file system against
a flush of each file from the flushing threads, side by side in one run.

    python bench/bench_staging.py --files 54000 --size 6000 --rounds 2

Each round writes ``--files`` files of ``--size`` bytes into a new empty folder of ``--dir`` (default: a scratch folder
in the current directory, so on the disk a library would be on) after an ``os.sync()``, once each way, in alternating
order.  Prints a Markdown table of seconds per round.  A flush per file is what runs where ``syncfs`` does not report
write-back errors (before Linux 5.8, off Linux); on this machine's kernel the library uses ``syncfs``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from incidentlib import storage

WAYS = ("flush per file", "one syncfs")


def run(folder: Path, way: str, files: int, payload: bytes) -> float:
    folder.mkdir()
    items = [(os.path.join(folder, f"PM-{n:06d}.yaml"), payload) for n in range(files)]
    syncfs = storage._syncfs() if way == "one syncfs" else None
    if way == "one syncfs" and syncfs is None:
        raise SystemExit("this kernel's syncfs does not report write-back errors: the library does not use it here")
    os.sync()
    started = time.perf_counter()
    original = storage._syncfs
    storage._syncfs = lambda: syncfs  # type: ignore[assignment]
    try:
        storage.write_durably(items)
    finally:
        storage._syncfs = original
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=27_000)
    parser.add_argument("--size", type=int, default=6_000, help="bytes per file (a bench record is about 6 kB)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    args = parser.parse_args()
    payload = b"x" * args.size
    scratch = Path(tempfile.mkdtemp(prefix="incidentlib-bench-staging-", dir=args.dir))
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    try:
        for round_number in range(args.rounds):
            for way in WAYS if round_number % 2 == 0 else WAYS[::-1]:
                seconds[way].append(run(scratch / f"{round_number}-{WAYS.index(way)}", way, args.files, payload))
                shutil.rmtree(scratch / f"{round_number}-{WAYS.index(way)}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"| {args.files:,} files × {args.size:,} bytes | " + " | ".join(WAYS) + " |\n|---|---|---|")
    for round_number in range(args.rounds):
        print(f"| round {round_number + 1} | " + " | ".join(f"{seconds[way][round_number]:.2f} s" for way in WAYS) + " |")


if __name__ == "__main__":
    main()
