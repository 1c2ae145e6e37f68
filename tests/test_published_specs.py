"""The specs under specs/ that reproduce published pre-training runs.

Each spec's derived parameter count must equal the count published for that model. Every architecture
here is fully specified, so equality is exact; the 1% bound is asserted as well so that a failure says
whether the derivation is far off or only off by a few tensors. All specs in specs/ must audit with no
error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runlib.spec import load_spec

ROOT = Path(__file__).parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))

# spec -> (published total parameter count, where it is published)
PUBLISHED: dict[str, tuple[int, str]] = {
    # The nanoGPT run: train.py defaults to bias=False and vocab 50304, and logs "number of parameters:
    # 123.59M", which excludes the 1024 x 768 = 786,432 learned position weights:
    # 123,587,328 + 786,432 = 124,373,760. (The GPT-2 checkpoint, with biases and vocab 50257, has
    # 124,439,808: 0.05% away.)
    "specs/gpt2-124m-owt.yaml": (124_373_760, "karpathy/nanoGPT train.py + config/train_gpt2.py, logged 123.59M + wpe"),
    "specs/pythia-160m.yaml": (162_322_944, "EleutherAI/pythia-160m model card, exact parameter count"),
    "specs/pythia-1b.yaml": (1_011_781_632, "EleutherAI/pythia-1b model card, exact parameter count"),
    "specs/llama2-7b.yaml": (6_738_415_616, "meta-llama/Llama-2-7b-hf checkpoint (arXiv 2307.09288)"),
    "specs/llama3-8b.yaml": (8_030_261_248, "meta-llama/Meta-Llama-3-8B checkpoint (arXiv 2407.21783)"),
    "specs/olmo2-7b.yaml": (7_298_617_344, "allenai/OLMo-2-1124-7B checkpoint (arXiv 2501.00656)"),
    "specs/tinyllama-1.1b.yaml": (
        1_100_048_384,
        "TinyLlama-1.1B-intermediate-step-1431k-3T checkpoint (arXiv 2401.02385)",
    ),
}


@pytest.mark.parametrize("spec_path", sorted(PUBLISHED))
def test_published_spec_loads(spec_path: str) -> None:
    loaded = load_spec(ROOT / spec_path)
    assert loaded.spec.name == Path(spec_path).stem


@pytest.mark.parametrize("spec_path", sorted(PUBLISHED))
def test_parameter_count_matches_published(spec_path: str) -> None:
    from runlib.plan import derive

    published, source = PUBLISHED[spec_path]
    plan = derive(load_spec(ROOT / spec_path).spec)
    total = plan.params.total
    assert abs(total - published) <= 0.01 * published, (
        f"{spec_path}: derived {total:,} parameters, published {published:,} ({source}): "
        f"off by {(total - published) / published:+.2%}"
    )
    assert total == published, f"{spec_path}: derived {total:,}, published {published:,} ({source})"
    assert plan.params.embedding + plan.params.non_embedding == total


@pytest.mark.parametrize("spec_file", SPECS, ids=[p.name for p in SPECS])
def test_spec_audits_without_errors(spec_file: Path) -> None:
    from runlib.audit import audit_spec_file

    result = audit_spec_file(spec_file)
    for finding in result.findings:
        assert finding.severity in {"error", "warning", "info"}, finding
    errors = [f for f in result.findings if f.severity == "error"]
    assert not errors, f"{spec_file.name}: " + "; ".join(
        f"{getattr(f, 'code', '?')} at {getattr(f, 'path', '?')}: {getattr(f, 'message', f)}" for f in errors
    )


def test_demo_has_nothing_the_trainer_refuses() -> None:
    """The published specs may describe layouts runlib does not enact (RUN warnings); the demo must run."""
    from runlib.audit import audit_spec_file

    result = audit_spec_file(ROOT / "specs" / "demo.yaml")
    assert [f.code for f in result.findings if f.code.startswith("RUN")] == []
