"""Benchmark artifact verification: runlib's XXH3-128 file digest against hashlib's SHA-256.

    python -m runlib.bench.verify_speed [--gib 1] [--repeats 5]

Writes --gib GiB of random bytes to a temporary file, then, interleaved, --repeats times each (median
reported, seconds per GB = 1e9 bytes):
    sha256    hashlib.sha256 over 4 MiB blocks (what the manifests used before; the peer)
    runlib    runlib.util.hashing.file_digest (XXH3-128, one reused buffer)
Both read from the page cache (the file was just written); from a cold disk the disk's read rate
bounds both. Goal: verification cheap enough to run on every read (runlib <= 0.25x sha256's time).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path

from runlib.util.hashing import file_digest


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    size = int(args.gib * (1 << 30))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.bin"
        with open(path, "wb") as f:
            for _ in range(0, size, 1 << 24):
                f.write(os.urandom(1 << 24))
        gb = path.stat().st_size / 1e9
        times: dict[str, list[float]] = {"sha256": [], "runlib": []}
        for _ in range(args.repeats):
            for name, fn in (("sha256", sha256_file), ("runlib", file_digest)):
                started = time.perf_counter()
                fn(path)
                times[name].append((time.perf_counter() - started) / gb)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{gb:.2f} GB from the page cache, median of {args.repeats} interleaved runs:")
    for name, value in med.items():
        print(f"  {name:<7} {value:6.3f} s/GB   ({1 / value:5.2f} GB/s)")
    print(f"  runlib / sha256 time: {med['runlib'] / med['sha256']:.2f}x")


if __name__ == "__main__":
    main()
