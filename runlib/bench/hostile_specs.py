"""Hostile specs: each must be refused with a `file:line:col: SPEC00x` error, fast, without a traceback.

    python -m runlib.bench.hostile_specs [--cli] [--repeat 3]

Prints, for every case of HOSTILE (the set tests/spec/test_hostile.py checks), the wall time of
`load_spec` on the written file (read, size check, YAML composition with the limits of
runlib.spec.bounded_yaml, validation; best of --repeat) and the first diagnostic; with --cli also the
wall time of a whole `python -m runlib audit FILE` (interpreter start and imports included) and its
exit status. Before these limits a 2.5 KB billion-laughs file took 45 s and 262 MB, `micro_batch: 2**40`
and `tokens: "1e100000000"` hung, 10,000 nested `[` took minutes and ended in a RecursionError, and
NaN or infinity passed. The cases are built from runlib/audit/cases_base.yaml (a sound spec) with
one hostile change each.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runlib.errors import SpecError
from runlib.spec import load_spec

BASE_SPEC = Path(__file__).resolve().parents[1] / "audit" / "cases_base.yaml"


@dataclass(frozen=True)
class Hostile:
    name: str
    build: Callable[[str], str | bytes]  # base spec text -> the hostile document
    code: str  # the code of the first diagnostic
    path: str | None = None  # the spec path it names, when the schema refuses a field
    memory_bomb: bool = False  # without the limits it exhausts memory: test it in a capped subprocess


def _replace(old: str, new: str) -> Callable[[str], str]:
    def build(base: str) -> str:
        if old not in base:
            raise ValueError(f"{old!r} is not in {BASE_SPEC}")
        return base.replace(old, new, 1)

    return build


def _prepend(text: str) -> Callable[[str], str]:
    return lambda base: text + base


def _laughs(levels: int) -> str:
    lines = ["l0: &l0 lol"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]")
    return "\n".join(lines) + "\n"


def _alias_chain(n: int) -> str:
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, n + 1)]
    return "\n".join(lines) + "\n"


def _many_values(base: str) -> str:
    return base + "x: [" + ", ".join(["1"] * 3000) + "]\n"


def _phases(n: int) -> Callable[[str], str]:
    def build(base: str) -> str:
        start, end = base.index("phases:\n"), base.index("checkpoint:")
        rows = "".join(f"  - {{name: p{i}, kind: foundation, tokens: 1%, mixture: {{web: 1}}}}\n" for i in range(n))
        return base[:start] + "phases:\n" + rows + base[end:]

    return build


_BATCH = "batch: {micro_batch: 8, grad_accum: 2, global_batch: 256Ki tokens}"
_OPT = "optimizer: {kind: adamw, lr: 1.5e-3, betas: [0.9, 0.95], weight_decay: 0.1, grad_clip: 1.0, z_loss: 1e-4}"
_MIX = "mixture: {web: 0.8, code: 0.2}}"


def _opt(**fields: str) -> Callable[[str], str]:
    new = _OPT
    for key, value in fields.items():
        start = new.index(f"{key}: ")
        end = min(i for i in (new.find(", ", start), new.find("}", start)) if i >= 0)
        if key == "betas":
            end = new.index("]", start) + 1
        new = new[:start] + f"{key}: {value}" + new[end:]
    return _replace(_OPT, new)


HOSTILE: list[Hostile] = [
    # YAML-level: composition limits (SPEC003) and unreadable input (SPEC001)
    Hostile("billion_laughs_9_levels", _prepend(_laughs(9)), "SPEC003", memory_bomb=True),
    Hostile("laughs_6_levels", _prepend(_laughs(6)), "SPEC003"),
    Hostile("alias_chain_40_deep", _prepend(_alias_chain(40)), "SPEC003"),
    Hostile("recursive_alias_sequence", _prepend("x: &a [*a]\n"), "SPEC003"),
    Hostile("recursive_alias_mapping", _prepend("x: &m {k: *m}\n"), "SPEC003"),
    Hostile("aliases_1001", _prepend("s: &s 1\nx: [" + ", ".join(["*s"] * 1001) + "]\n"), "SPEC003"),
    Hostile("undefined_alias", _prepend("x: *nowhere\n"), "SPEC001"),
    Hostile("flow_nesting_10k", _prepend("x: " + "[" * 10_000 + "]" * 10_000 + "\n"), "SPEC003"),
    Hostile("flow_nesting_100k_200kb", _prepend("x: " + "[" * 100_000 + "]" * 100_000 + "\n"), "SPEC003"),
    Hostile("block_sequence_nesting_10k", _prepend("x:\n" + "- " * 10_000 + "1\n"), "SPEC003"),
    Hostile(
        "block_mapping_nesting_40",
        _prepend("".join("  " * i + "k:\n" for i in range(40)) + "  " * 40 + "v\n"),
        "SPEC003",
    ),
    Hostile("values_3000", _many_values, "SPEC003"),
    Hostile("document_1mib_of_comments", lambda base: base + ("# " + "x" * 1022 + "\n") * 1024, "SPEC003"),
    Hostile("key_1000_chars", _prepend("k" * 1000 + ": 1\n"), "SPEC003"),
    Hostile("key_100k_chars", _prepend("k" * 100_000 + ": 1\n"), "SPEC001"),  # YAML: a simple key is <= 1024
    Hostile("integer_5000_digits", _replace("seed: 0", "seed: " + "9" * 5000), "SPEC003"),
    Hostile("hex_integer_5000_digits", _replace("seed: 0", "seed: 0x" + "f" * 5000), "SPEC003"),
    Hostile("integer_key_5000_digits", _prepend("? " + "9" * 5000 + "\n: 1\n"), "SPEC003"),
    # explicit tags: refused whatever they say (`!!str 5` and python/object/apply passed)
    Hostile("explicit_int_tag_on_text", _replace("seed: 0", "seed: !!int abc"), "SPEC001"),
    Hostile("explicit_bool_tag_on_text", _replace("bias: false", "bias: !!bool maybe"), "SPEC001"),
    Hostile("explicit_str_tag_on_number", _replace("seed: 0", "seed: !!str 0"), "SPEC001"),
    Hostile("explicit_int_tag_on_number", _replace("seed: 0", "seed: !!int 0"), "SPEC001"),
    Hostile(
        "python_object_apply_on_scalar",
        _replace("name: case-base", "name: !!python/object/apply:os.system touch-pwned"),
        "SPEC001",
    ),
    Hostile("python_name_tag_on_key", _prepend("? !!python/name:os.system\n: 1\n"), "SPEC001"),
    Hostile("local_tag_on_mapping", _replace(_OPT, "optimizer: !custom " + _OPT[len("optimizer: ") :]), "SPEC001"),
    Hostile("map_tag_on_sequence", _replace("betas: [0.9, 0.95]", "betas: !!seq [0.9, 0.95]"), "SPEC001"),
    Hostile("nul_byte", _replace("name: case-base", "name: case\x00base"), "SPEC001"),
    Hostile("invalid_utf8", lambda base: base.encode().replace(b"case-base", b"case-\xff-base", 1), "SPEC001"),
    # schema-level: finite, bounded values (SPEC002 naming the field)
    Hostile("float_1e9999_lr", _opt(lr="1e9999"), "SPEC002", "optimizer.lr"),
    Hostile("lr_nan", _opt(lr=".nan"), "SPEC002", "optimizer.lr"),
    Hostile("lr_inf", _opt(lr=".inf"), "SPEC002", "optimizer.lr"),
    Hostile("beta_nan", _opt(betas="[.nan, 0.95]"), "SPEC002", "optimizer.betas[0]"),
    Hostile("beta_inf", _opt(betas="[0.9, .inf]"), "SPEC002", "optimizer.betas[1]"),
    Hostile("beta_1_torch_refuses", _opt(betas="[0.9, 1.0]"), "SPEC002", "optimizer.betas[1]"),
    Hostile("weight_decay_inf", _opt(weight_decay=".inf"), "SPEC002", "optimizer.weight_decay"),
    Hostile("grad_clip_nan", _opt(grad_clip=".nan"), "SPEC002", "optimizer.grad_clip"),
    Hostile("grad_clip_inf", _opt(grad_clip=".inf"), "SPEC002", "optimizer.grad_clip"),
    Hostile("z_loss_inf", _opt(z_loss=".inf"), "SPEC002", "optimizer.z_loss"),
    Hostile(
        "mixture_weight_nan", _replace(_MIX, "mixture: {web: .nan, code: 0.2}}"), "SPEC002", "phases[0].mixture.web"
    ),
    Hostile(
        "mixture_weight_inf", _replace(_MIX, "mixture: {web: 0.8, code: .inf}}"), "SPEC002", "phases[0].mixture.code"
    ),
    Hostile(
        "train_on_weight_nan",
        _replace("train_on: {web: 0.8, code: 0.2}", "train_on: {web: .nan, code: 0.2}"),
        "SPEC002",
        "tokenizer.train_on.web",
    ),
    Hostile("rope_theta_inf", _replace("rope_theta: 50000", "rope_theta: .inf"), "SPEC002", "model.rope_theta"),
    Hostile(
        "phase_rope_theta_nan", _replace("rope_theta: 200000", "rope_theta: .nan"), "SPEC002", "phases[2].rope_theta"
    ),
    Hostile("spike_zscore_nan", _replace("zscore: 5.0", "zscore: .nan"), "SPEC002", "monitor.spike.zscore"),
    Hostile("mfu_nan", _replace("mfu: 0.4", "mfu: .nan"), "SPEC002", "hardware.mfu"),
    Hostile("mfu_1e-300_underflows", _replace("mfu: 0.4", "mfu: 1e-300"), "SPEC002", "hardware.mfu"),
    Hostile(
        "min_lr_ratio_inf", _replace("min_lr_ratio: 0.1", "min_lr_ratio: .inf"), "SPEC002", "schedule.min_lr_ratio"
    ),
    Hostile("micro_batch_2_40", _replace("micro_batch: 8", f"micro_batch: {2**40}"), "SPEC002", "batch.micro_batch"),
    Hostile(
        "phase_micro_batch_2_40",
        _replace("batch: {micro_batch: 4}", f"batch: {{micro_batch: {2**40}}}"),
        "SPEC002",
        "phases[2].batch.micro_batch",
    ),
    Hostile("heads_2_40", _replace("heads: 12", f"heads: {2**40}"), "SPEC002", "model.heads"),
    Hostile(
        "tokens_quoted_1e100000000", _replace("tokens: 2411724800 ", 'tokens: "1e100000000" '), "SPEC002", "tokens"
    ),
    Hostile("tokens_plain_1e100000000", _replace("tokens: 2411724800 ", "tokens: 1e100000000 "), "SPEC002", "tokens"),
    Hostile("tokens_10_to_19", _replace("tokens: 2411724800 ", f"tokens: {10**19} "), "SPEC002", "tokens"),
    Hostile(
        "phase_tokens_1e100000000", _replace("tokens: 85%", "tokens: 1e100000000 tokens"), "SPEC002", "phases[0].tokens"
    ),
    Hostile("phase_tokens_percent_inf", _replace("tokens: 85%", "tokens: 1e999%"), "SPEC002", "phases[0].tokens"),
    Hostile(
        "global_batch_zero",
        _replace(_BATCH, "batch: {micro_batch: 8, grad_accum: 2, global_batch: 0 tokens}"),
        "SPEC002",
        "batch.global_batch",
    ),
    Hostile("checkpoint_every_0", _replace("every: 1000 steps", "every: 0 steps"), "SPEC002", "checkpoint.every"),
    Hostile("checkpoint_every_0_percent", _replace("every: 1000 steps", "every: 0%"), "SPEC002", "checkpoint.every"),
    Hostile("seed_2_100", _replace("seed: 0", f"seed: {2**100}"), "SPEC002", "seed"),
    Hostile("seed_2_63", _replace("seed: 0", f"seed: {2**63}"), "SPEC002", "seed"),
    Hostile("seed_negative", _replace("seed: 0", "seed: -1"), "SPEC002", "seed"),
    Hostile(
        "heldout_docs_1e15", _replace("heldout_docs: 200", f"heldout_docs: {10**15}"), "SPEC002", "data.heldout_docs"
    ),
    Hostile("phases_33", _phases(33), "SPEC002", "phases"),
    # names become file names: 300 characters audited clean, then broke the HTML report and Snakemake
    Hostile("run_name_300_chars", _replace("name: case-base", "name: " + "n" * 300), "SPEC002", "name"),
    Hostile(
        "phase_name_300_chars", _replace("- {name: foundation", "- {name: " + "f" * 300), "SPEC002", "phases[0].name"
    ),
    # the MLflow experiment: over 500 characters MLflow refused it in the track job; a newline or NUL
    Hostile(
        "experiment_newline",
        _replace("experiment: case-base", 'experiment: "case\\nbase"'),
        "SPEC002",
        "tracking.experiment",
    ),
    Hostile(
        "experiment_600_chars",
        _replace("experiment: case-base", "experiment: " + "e" * 600),
        "SPEC002",
        "tracking.experiment",
    ),
    # source names name MLflow metrics (heldout/<source>/loss): '..', '.' and '' audited clean, passed the
    # gate and the training, then MLflow refused the metric name in the track job
    Hostile(
        "source_name_dotdot", _replace("    web: {domain", '    "..": {domain'), "SPEC002", "data.sources....[key]"
    ),
    Hostile("source_name_empty", _replace("    web: {domain", '    "": {domain'), "SPEC002", "data.sources..[key]"),
    Hostile(
        "source_name_slash", _replace("    web: {domain", '    "w/eb": {domain'), "SPEC002", "data.sources.w/eb.[key]"
    ),
    Hostile(
        "source_name_dash", _replace("    web: {domain", '    "-web": {domain'), "SPEC002", "data.sources.-web.[key]"
    ),
    Hostile(
        "source_name_unicode", _replace("    web: {domain", "    wéb: {domain"), "SPEC002", "data.sources.wéb.[key]"
    ),
]


def write_case(case: Hostile, directory: Path) -> Path:
    doc = case.build(BASE_SPEC.read_text())
    path = directory / f"{case.name}.yaml"
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc, encoding="utf-8")
    return path


def time_load(path: Path, repeat: int) -> tuple[float, str]:
    """(best wall time of load_spec in seconds, the first diagnostic or 'loaded')."""
    best, first = float("inf"), "loaded"
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            load_spec(path)
        except SpecError as exc:
            first = str(exc.diagnostics[0])
        best = min(best, time.perf_counter() - start)
    return best, first


def time_cli(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "runlib", "audit", str(path)], capture_output=True, text=True, timeout=600, check=False
    )
    return time.perf_counter() - start, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", action="store_true", help="also time `python -m runlib audit` on each case")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    load_spec(BASE_SPEC)  # warm: imports and pydantic schemas built once
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for case in HOSTILE:
            path = write_case(case, Path(tmp))
            seconds, first = time_load(path, args.repeat)
            worst = max(worst, seconds)
            size = path.stat().st_size
            line = f"{case.name:<30} {size:>9,} B  load {seconds * 1000:7.1f} ms"
            if args.cli:
                cli_seconds, rc = time_cli(path)
                line += f"  cli {cli_seconds:5.2f} s rc {rc}"
            shown = first.replace(str(path), f"{case.name}.yaml")
            print(f"{line}  {shown[:110]}")
    print(f"{len(HOSTILE)} hostile specs; slowest in-process load {worst * 1000:.1f} ms")


if __name__ == "__main__":
    main()
