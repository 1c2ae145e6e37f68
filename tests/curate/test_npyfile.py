"""NpyFile reads a .npy table's rows and keys with pread, the same as numpy reads them, and refuses a file
whose size is not what its header says."""

from __future__ import annotations

import numpy as np
import pytest

from runlib.curate.npyfile import NpyFile, sorted_range
from runlib.curate.partition import band_dtype


def test_rows_and_sorted_ranges_equal_numpys(tmp_path):
    rng = np.random.default_rng(0)
    table = np.zeros((3, 500), dtype=band_dtype(2))
    for band in range(3):
        table[band]["mix"] = np.sort(rng.integers(0, 2**63, size=500, dtype=np.uint64))
        table[band]["line"] = np.arange(500)
    np.save(tmp_path / "bands.npy", table)
    with NpyFile(tmp_path / "bands.npy") as f:
        assert f.shape == (3, 500) and f.dtype == table.dtype
        assert np.array_equal(f.rows(2, 10, 60), table[2][10:60])
        for lo, hi in ((0, 2**62), (2**61, 2**63), (0, 1 << 64)):
            start, stop = sorted_range(f, 1, "mix", lo, hi)
            mix = table[1]["mix"]
            assert (start, stop) == (
                int(np.searchsorted(mix, lo)),
                len(mix) if hi >= 1 << 64 else int(np.searchsorted(mix, hi)),
            )


def test_a_truncated_table_is_refused(tmp_path):
    np.save(tmp_path / "t.npy", np.arange(100, dtype=np.uint64))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-8])
    with pytest.raises(ValueError, match="its header says"):
        NpyFile(tmp_path / "t.npy")
