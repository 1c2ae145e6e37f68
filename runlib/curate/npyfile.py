"""Rows of a .npy table read with pread(2), never mapped: a job that reads a slice of many shards' tables holds
that slice, not the tables. A memory map would do the same in theory, but the kernel maps whole folios of a
file's page cache around each page touched (Linux large folios: up to 2 MiB), so a bisection over every
shard's table made most of every table resident: a dedup_partition job's RSS grew with the source.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
from numpy.typing import NDArray


class NpyFile:
    """A C-ordered .npy array of 1 or 2 dimensions: rows of its last axis read on demand."""

    def __init__(self, path: Path):
        self._fd = -1
        self.path = Path(path)
        with open(self.path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            self.offset = f.tell()
        if fortran or len(shape) not in (1, 2) or dtype.hasobject:
            raise ValueError(f"{self.path}: not a C-ordered 1-D or 2-D table")
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype: np.dtype[Any] = dtype
        self.ndim = len(shape)
        self.rows_per_band = shape[-1]
        expected = self.offset + int(np.prod(shape)) * dtype.itemsize
        if os.path.getsize(self.path) != expected:
            raise ValueError(f"{self.path}: {os.path.getsize(self.path)} bytes, its header says {expected}")
        self._fd = os.open(self.path, os.O_RDONLY)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> NpyFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _position(self, band: int, row: int) -> int:
        return self.offset + (band * self.rows_per_band + row) * self.dtype.itemsize

    def rows(self, band: int, start: int, stop: int) -> NDArray[Any]:
        """Rows [start, stop) of band `band` (0 for a 1-D table), a copy."""
        count = max(0, stop - start)
        data = os.pread(self._fd, count * self.dtype.itemsize, self._position(band, start))
        if len(data) != count * self.dtype.itemsize:
            raise ValueError(f"{self.path}: short read at row {start} of band {band}")
        return np.frombuffer(data, dtype=self.dtype).copy()

    def value(self, band: int, row: int, field: str) -> int:
        """The first element of one field of one row, as an int (a sort key)."""
        field_dtype, field_offset = self.dtype.fields[field][:2]  # type: ignore[index]
        base = field_dtype.base
        data = os.pread(self._fd, base.itemsize, self._position(band, row) + field_offset)
        return int(np.frombuffer(data, dtype=base)[0])


class _Keys:
    """One field of a band of an NpyFile as a sequence, for bisect."""

    def __init__(self, table: NpyFile, band: int, field: str):
        self.table, self.band, self.field = table, band, field

    def __len__(self) -> int:
        return self.table.rows_per_band

    def __getitem__(self, row: int) -> int:
        return self.table.value(self.band, row, self.field)


def sorted_range(table: NpyFile, band: int, field: str, lo: int, hi: int) -> tuple[int, int]:
    """[start, stop) of the rows of a band sorted by `field` (its first element) with lo <= key < hi."""
    keys = _Keys(table, band, field)
    start = bisect.bisect_left(keys, lo)
    stop = len(keys) if hi >= 1 << 64 else bisect.bisect_left(keys, hi, lo=start)
    return start, stop
