"""File digests for verifying artifacts and fingerprinting input files.

XXH3-128 (xxhash, https://github.com/Cyan4973/xxHash; Python binding `xxhash` 3.x) rather than SHA-256:
corruption detection needs no collision resistance against an adversary, and XXH3 reads at memory
bandwidth (about 10x SHA-256 on one core), so verifying shard-sized artifacts on every read stays cheap.
Digests are written as "xxh3_128:<hex>" so the algorithm is explicit in every manifest.
"""

from __future__ import annotations

from pathlib import Path

import xxhash

ALGORITHM = "xxh3_128"
BLOCK_BYTES = 1 << 22


def file_digest(path: str | Path) -> str:
    """'xxh3_128:<32 hex digits>' of the file's bytes, read in 4 MiB blocks."""
    h = xxhash.xxh3_128()
    buffer = bytearray(BLOCK_BYTES)  # one reused buffer: read() would allocate 4 MiB per block
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            h.update(view[:n])
    return f"{ALGORITHM}:{h.hexdigest()}"


def bytes_digest(data: bytes) -> str:
    return f"{ALGORITHM}:{xxhash.xxh3_128_hexdigest(data)}"
