"""The audit's memory plot: every component's size is readable, however small beside the device."""

from __future__ import annotations

from pathlib import Path

from runlib.audit.render.plots import GIB, MEMORY_PARTS, format_bytes, memory_table, plot_memory
from runlib.plan import derive
from runlib.spec import load_spec


def test_format_bytes() -> None:
    assert format_bytes(5 * 2**20) == "5 MiB"
    assert format_bytes(34.04 * GIB) == "34 GiB"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(0) == format_bytes(None) == format_bytes(float("inf")) == "–"


def test_the_table_names_the_parts_the_bars_cannot_show(tmp_path: Path) -> None:
    plan = derive(load_spec("specs/demo.yaml").spec)  # this machine's memory per process; the weights are 5 MiB
    headers, rows = memory_table(plan)
    assert headers == ["component", *(p.name for p in plan.phases)]
    parts = plan.phases[0].memory.as_dict()
    shown = {label for key, label in MEMORY_PARTS if parts.get(key)}
    assert {row[0] for row in rows[:-2]} == shown and "weights" in shown
    weights = next(row for row in rows if row[0] == "weights")
    assert weights[1] == format_bytes(parts["weights"]) and weights[1].endswith("MiB")
    total = sum(parts.values())
    assert rows[-2] == ["total", *(format_bytes(p.memory.total) for p in plan.phases)]
    assert rows[-2][1] == format_bytes(total)
    device = plan.accelerator.memory_gib
    assert rows[-1][0] == f"of {device:.3g} GiB" and rows[-1][1] == f"{total / (device * GIB):.1%}"
    path = plot_memory(plan, tmp_path / "memory.png")
    from PIL import Image

    with Image.open(path) as im:  # the bars (420 px) and a row of table per line beneath
        assert im.size[0] == 900 and im.size[1] >= 420 + 20 * (len(rows) + 1)
