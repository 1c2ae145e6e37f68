"""The phase loader: packing masks (handout 4.3), purity and resume, world-size independence, mixture counts,
epochs, fill-in-the-middle, and the three packings."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from runlib.audit.cases import case_data
from runlib.data.loader import (
    IGNORE_INDEX,
    Mixture,
    PhaseLoader,
    Segment,
    SourceStream,
    document_mask,
    pack_window,
    stable_seed,
)
from runlib.data.loader_config import build_loader_config
from runlib.data.shards import TokenShard, write_shard
from runlib.plan.derive import derive
from runlib.spec import validate_data

EOS, FIM_P, FIM_M, FIM_S = 0, 2, 3, 4
IDS = {"eos": EOS, "fim_prefix": FIM_P, "fim_middle": FIM_M, "fim_suffix": FIM_S}


def make_docs(n: int, seed: int, low: int = 1, high: int = 60) -> list[list[int]]:
    """n documents of ids >= 10 (never a special id), each ending with EOS."""
    rng = np.random.default_rng(seed)
    return [rng.integers(10, 1000, size=int(rng.integers(low, high))).tolist() + [EOS] for _ in range(n)]


def make_dirs(tmp_path: Path, docs: dict[str, list[list[int]]]) -> dict[str, Path]:
    dirs = {}
    for name, ds in docs.items():
        write_shard(tmp_path / name, "train", ds, "uint16")
        dirs[name] = tmp_path / name
    return dirs


def make_spec(
    phases: list[dict],
    seq_len: int = 16,
    micro: int = 2,
    accum: int = 2,
    devices: int = 2,
    packing: str = "document",
    boundary: str = "masked",
    fim: dict | None = None,
    seed: int = 7,
):
    code = {"domain": "code", "input": {"format": "jsonl", "path": "c/*.jsonl"}, "tokens": 10000}
    if fim is not None:
        code["fim"] = fim
    sources = {
        "web": {"domain": "web", "input": {"format": "jsonl", "path": "w/*.jsonl"}, "tokens": 10000},
        "code": code,
        "books": {"domain": "books", "input": {"format": "jsonl", "path": "b/*.jsonl"}, "tokens": 10000},
    }
    steps = sum(int(p["tokens"].split()[0]) for p in phases)
    patch = {
        "seed": seed,
        "data.sources": sources,
        "data.packing": packing,
        "data.boundary_targets": boundary,
        "tokenizer.train_on": {"web": 1.0},
        "model.seq_len": seq_len,
        "batch": {"micro_batch": micro, "grad_accum": accum},
        "hardware.devices_per_node": devices,
        "tokens": steps * micro * accum * devices * seq_len,
        "phases": phases,
    }
    spec = validate_data(case_data(patch)).spec
    return spec, derive(spec)


def phase(name: str, steps: int, mixture: dict, **extra) -> dict:
    return {"name": name, "kind": "foundation", "tokens": f"{steps} steps", "mixture": mixture, **extra}


def rows(batch) -> list[tuple]:
    return sorted(
        (
            int(batch.source_index[r]),
            int(batch.stream_start[r]),
            tuple(batch.input_ids[r].tolist()),
            tuple(batch.targets[r].tolist()),
            tuple(batch.position_ids[r].tolist()),
            tuple(batch.doc_ids[r].tolist()),
        )
        for r in range(len(batch))
    )


def assert_batches_equal(a, b) -> None:
    for field in ("input_ids", "targets", "position_ids", "doc_ids", "source_index", "stream_start"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field


def epoch_stream(stream: SourceStream, epochs: int) -> np.ndarray:
    """The stream rebuilt by hand from the shard (no FIM): each epoch's documents in its permutation."""
    pieces = []
    for e in range(epochs):
        for d in stream.epoch(e).perm:
            pieces.append(np.asarray(stream.shard.doc(int(d)), dtype=np.int64))
    return np.concatenate(pieces)


# ------------------------------------------------------------------------------------------------ 4.3


def test_handout_example_document_packing():
    bos_a, a, bos_b, b = 11, 12, 21, 22
    alloc = np.array([bos_a, a, EOS, bos_b, b, EOS])  # a 6-position allocation, nothing after it
    inputs, targets, positions, doc_ids = pack_window(alloc, EOS, "document", "masked", seq_len=6)
    assert inputs.tolist() == [bos_a, a, EOS, bos_b, b, EOS]
    # EOS stays the target at 1 and 4; EOS_A -> BOS_B (2) is masked; 5 has no following token
    assert targets.tolist() == [a, EOS, IGNORE_INDEX, b, EOS, IGNORE_INDEX]
    assert positions.tolist() == [0, 1, 2, 0, 1, 2]
    assert doc_ids.tolist() == [0, 0, 0, 1, 1, 1]
    assert targets[3] == b  # BOS_B predicts b

    mask = document_mask(torch.from_numpy(doc_ids)[None])[0]
    for i in range(6):
        for j in range(6):
            assert bool(mask[i, j]) == (doc_ids[i] == doc_ids[j] and j <= i)
    assert not mask[3:, :3].any()  # document B never reads document A
    assert mask[3, 3] and mask[5, 3] and mask[2, 0]

    # with the next document's first token in the window, position 5 (EOS_B -> next) is still masked
    _, targets7, _, _ = pack_window(np.append(alloc, 31), EOS, "document", "masked")
    assert targets7.tolist() == [a, EOS, IGNORE_INDEX, b, EOS, IGNORE_INDEX]
    _, kept, _, _ = pack_window(np.append(alloc, 31), EOS, "document", "kept")
    assert kept.tolist() == [a, EOS, bos_b, b, EOS, 31]


def test_pack_window_stream_and_none():
    window = np.array([11, 12, EOS, 21, 22, EOS, 31])
    inputs, targets, positions, doc_ids = pack_window(window, EOS, "stream", "masked")
    assert inputs.tolist() == [11, 12, EOS, 21, 22, EOS]
    assert targets.tolist() == [12, EOS, IGNORE_INDEX, 22, EOS, IGNORE_INDEX]
    assert positions.tolist() == list(range(6)) and doc_ids.tolist() == [0] * 6
    _, targets, _, _ = pack_window(window, EOS, "stream", "kept")
    assert targets.tolist() == [12, EOS, 21, 22, EOS, 31]
    # none: one document, padded with EOS, padding never scored (kept or not)
    for boundary in ("masked", "kept"):
        inputs, targets, positions, doc_ids = pack_window(np.array([11, 12, 13, EOS]), EOS, "none", boundary, 6)
        assert inputs.tolist() == [11, 12, 13, EOS, EOS, EOS]
        assert targets.tolist() == [12, 13, EOS] + [IGNORE_INDEX] * 3
        assert positions.tolist() == list(range(6)) and doc_ids.tolist() == [0] * 6


# ------------------------------------------------------------------------------------------------ loader


@pytest.fixture
def two_phase(tmp_path):
    spec, plan = make_spec(
        [phase("a", 12, {"web": 0.5, "code": 0.3, "books": 0.2}), phase("b", 6, {"web": 0.25, "code": 0.75})]
    )
    dirs = make_dirs(tmp_path, {"web": make_docs(40, 1), "code": make_docs(40, 2), "books": make_docs(40, 3)})
    return spec, plan, dirs


def test_attributes(two_phase):
    spec, plan, dirs = two_phase
    loader = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)
    assert loader.source_names == ["books", "code", "web"]
    assert loader.global_batch == 2 * 2 * 2 and loader.seq_len == 16 and loader.steps == 12
    batch = loader.global_batch_at(0)
    assert batch.input_ids.shape == batch.targets.shape == (8, 16)
    assert batch.position_ids.shape == batch.doc_ids.shape == (8, 16)
    assert batch.input_ids.dtype == batch.targets.dtype == torch.long
    assert batch.source_index.shape == (8,) and batch.source_index.dtype == torch.long
    assert batch.scored_tokens == int((batch.targets != -100).sum())
    # targets are the inputs shifted by one within each window
    assert torch.equal(
        batch.targets[:, :-1][batch.targets[:, :-1] != -100], batch.input_ids[:, 1:][batch.targets[:, :-1] != -100]
    )
    later = PhaseLoader(build_loader_config(spec, plan, 1), dirs, IDS)
    assert later.source_names == ["code", "web"]  # books has no weight in phase b


def test_pure_and_resumable(two_phase):
    spec, plan, dirs = two_phase
    loader = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)
    assert_batches_equal(loader.global_batch_at(5), loader.global_batch_at(5))
    first = [loader.global_batch_at(s) for s in range(loader.steps)]
    fresh = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)
    for s in reversed(range(loader.steps)):  # any order: no cursor
        assert_batches_equal(fresh.global_batch_at(s), first[s])
    assert not torch.equal(first[0].input_ids, first[1].input_ids)


def test_windows_tile_each_stream(two_phase):
    spec, plan, dirs = two_phase
    a, b = (
        PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS),
        PhaseLoader(build_loader_config(spec, plan, 1), dirs, IDS),
    )
    length = a.seq_len
    ends = {}
    for si, name in enumerate(a.source_names):
        starts, windows = [], {}
        for s in range(a.steps):
            batch = a.global_batch_at(s)
            in_step = []
            for r in np.flatnonzero(batch.source_index.numpy() == si):
                start = int(batch.stream_start[r])
                in_step.append(start)
                windows[start] = (batch.input_ids[r].numpy(), batch.targets[r].numpy())
            starts += sorted(in_step)  # shuffled within a step
        count = a.mixture.cum(a.steps)[si]
        assert starts == [k * length for k in range(count)]  # contiguous, each once, step after step
        stream = epoch_stream(a.streams[si], 3)
        assert len(stream) > count * length + 1
        for start, (inputs, targets) in windows.items():
            assert inputs.tolist() == stream[start : start + length].tolist()
            window = stream[start + 1 : start + length + 1]
            assert targets.tolist() == np.where(inputs == EOS, IGNORE_INDEX, window).tolist()
        ends[name] = count * length
    assert a.source_tokens_consumed() == ends == {n: e for n, e in b.source_tokens_consumed(1).items()}
    for si, name in enumerate(b.source_names):
        first = min(
            int(b.global_batch_at(0).stream_start[r])
            for r in np.flatnonzero(b.global_batch_at(0).source_index.numpy() == si)
        )
        assert first == ends[name]  # the next phase starts where this one ended
        assert int(b.window_start(si, 0)) == ends[name]


def test_same_batch_on_any_world(two_phase):
    spec, plan, dirs = two_phase
    loader = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)
    for step in (0, 3, 11):
        whole = loader.global_batch_at(step)
        for world, micro in ((1, 2), (2, 2), (1, 8), (4, 1), (2, 4)):
            parts = [
                loader.micro_batch(step, m, r, world, micro)
                for m in range(loader.global_batch // (micro * world))
                for r in range(world)
            ]
            got = [row for p in parts for row in rows(p)]
            assert sorted(got) == rows(whole)
            assert torch.equal(torch.cat([p.input_ids for p in parts]), whole.input_ids)  # even the order
    with pytest.raises(ValueError, match="does not split"):
        loader.micro_batch(0, 0, 0, 3, 2)
    with pytest.raises(ValueError, match="out of range"):
        loader.micro_batch(0, 2, 0, 2, 2)


def test_mixture_counts(two_phase):
    spec, plan, dirs = two_phase
    loader = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)
    mix, big = loader.mixture, loader.global_batch
    weights = {"books": 0.2, "code": 0.3, "web": 0.5}
    cum = [0, 0, 0]
    for s in range(loader.steps):
        counts = mix.counts(s)
        assert sum(counts) == big and min(counts) >= 0
        batch = loader.global_batch_at(s)
        assert np.bincount(batch.source_index.numpy(), minlength=3).tolist() == counts
        cum = [c + n for c, n in zip(cum, counts, strict=True)]
        assert cum == mix.cum(s + 1)
        for i, name in enumerate(loader.source_names):
            if name != "web":  # web has the largest weight and takes the rest
                assert cum[i] == int(np.floor((s + 1) * big * weights[name] + 1e-9))
    n = 1000
    for i, name in enumerate(mix.names):
        assert abs(mix.cum(n)[i] / (n * big) - weights[name]) <= 1 / big

    m = Mixture({"a": 3, "b": 1, "c": 0}, [Segment(0, 10, 4)])  # unnormalised weights, a zero weight
    assert m.names == ["a", "b"] and m.cum(10) == [30, 10]
    with pytest.raises(ValueError, match="too small for the mixture"):
        Mixture({"a": 0.25, "b": 0.25, "c": 0.25, "d": 0.25}, [Segment(0, 100, 1)]).check()
    Mixture({"a": 0.5, "b": 0.25, "c": 0.25}, [Segment(0, 100, 2)]).check()  # fits: b and c alternate


def test_batch_too_small_is_a_value_error(tmp_path):
    spec, plan = make_spec([phase("a", 4, {"web": 0.34, "code": 0.33, "books": 0.33})], micro=1, accum=1, devices=1)
    dirs = make_dirs(tmp_path, {"web": make_docs(5, 1), "code": make_docs(5, 2), "books": make_docs(5, 3)})
    with pytest.raises(ValueError, match="too small"):
        PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)


def test_tiny_source_wraps_into_new_epochs(tmp_path):
    spec, plan = make_spec([phase("a", 10, {"web": 0.5, "code": 0.5})])
    dirs = make_dirs(tmp_path, {"web": make_docs(40, 1), "code": make_docs(4, 2, 1, 4)})  # code: <= 16 tokens
    loader = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)
    code = loader.streams[loader.source_names.index("code")]
    assert code.epoch_tokens < loader.seq_len + 1  # one window spans several epochs
    perms = [code.epoch(e).perm.tolist() for e in range(4)]
    assert len({tuple(p) for p in perms}) > 1 and perms[0] != perms[1]
    assert sorted(perms[1]) == list(range(4))
    count = loader.mixture.cum(loader.steps)[0]
    stream = epoch_stream(code, count * loader.seq_len // code.epoch_tokens + 2)
    for s in range(loader.steps):
        batch = loader.global_batch_at(s)
        for r in np.flatnonzero(batch.source_index.numpy() == 0):
            start = int(batch.stream_start[r])
            assert batch.input_ids[r].tolist() == stream[start : start + loader.seq_len].tolist()


# ------------------------------------------------------------------------------------------------ FIM


def fim_stream(tmp_path, rate: float, spm_rate: float, n: int = 30) -> tuple[SourceStream, list[list[int]]]:
    docs = make_docs(n, 5, 0, 40)  # includes EOS-only documents
    write_shard(tmp_path / "code", "train", docs, "uint16")
    shard = TokenShard(tmp_path / "code", "train")
    return SourceStream("code", shard, 3, EOS, rate, spm_rate, (FIM_P, FIM_M, FIM_S)), docs


@pytest.mark.parametrize("spm_rate", [0.0, 1.0])
def test_fim_layout(tmp_path, spm_rate):
    stream, docs = fim_stream(tmp_path, 1.0, spm_rate)
    assert stream.epoch_tokens == sum(map(len, docs)) + 3 * len(docs)
    for e in range(2):
        perm = stream.epoch(e).perm
        got, lengths = stream.documents(np.arange(len(docs)) + e * len(docs), 100)
        for j, d in enumerate(perm):
            original = docs[d]
            body = original[:-1]
            seq = got[j, : lengths[j]].tolist()
            assert len(seq) == len(original) + 3
            assert seq[0] == FIM_P and seq[-1] == EOS
            assert [seq.count(t) for t in (FIM_P, FIM_M, FIM_S)] == [1, 1, 1]
            i_s, i_m = seq.index(FIM_S), seq.index(FIM_M)
            if spm_rate == 0.0:  # PSM: <P> prefix <S> suffix <M> middle EOS
                prefix, suffix, middle = seq[1:i_s], seq[i_s + 1 : i_m], seq[i_m + 1 : -1]
                assert prefix + middle + suffix == body
            else:  # SPM: <P> <S> suffix <M> prefix middle EOS
                assert i_s == 1
                suffix, prefix_middle = seq[2:i_m], seq[i_m + 1 : -1]
                assert prefix_middle + suffix == body
            assert sorted(seq[1:-1]) == sorted(body + [FIM_P, FIM_M, FIM_S][1:])  # a permutation, + sentinels
        # the packed stream is the transformed documents end to end
        flat = np.concatenate([got[j, : lengths[j]] for j in range(len(docs))])
        start = e * stream.epoch_tokens
        assert stream.tokens_at(np.arange(start, start + len(flat))).tolist() == flat.tolist()


def test_fim_cut_points_vary(tmp_path):
    stream, docs = fim_stream(tmp_path, 1.0, 0.5, n=200)
    got, lengths = stream.documents(np.arange(200), 100)
    layouts = {"psm": 0, "spm": 0}
    prefixes = set()
    for j in range(200):
        seq = got[j, : lengths[j]].tolist()
        layouts["spm" if seq[1] == FIM_S else "psm"] += 1
        prefixes.add(seq.index(FIM_S))
    assert layouts["psm"] > 50 and layouts["spm"] > 50
    assert len(prefixes) > 10


def test_fim_rate_zero_and_half(tmp_path):
    stream, docs = fim_stream(tmp_path, 0.0, 0.5)
    got, lengths = stream.documents(np.arange(len(docs)), 100)
    for j, d in enumerate(stream.epoch(0).perm):
        assert got[j, : lengths[j]].tolist() == docs[d]
    assert stream.epoch_tokens == sum(map(len, docs))

    half = SourceStream("code", stream.shard, 3, EOS, 0.5, 0.5, (FIM_P, FIM_M, FIM_S))
    assert half.n_fim == round(0.5 * len(docs))
    for e in range(3):
        ep = half.epoch(e)
        assert int(ep.fim.sum()) == half.n_fim and ep.cum[-1] == half.epoch_tokens
    assert half.epoch(0).fim.tolist() != half.epoch(1).fim.tolist()


def test_fim_through_the_spec(tmp_path):
    spec, plan = make_spec([phase("a", 3, {"code": 1.0})], fim={"rate": 1.0, "spm_rate": 0.0}, packing="none")
    dirs = make_dirs(tmp_path, {"code": make_docs(20, 4, 1, 10)})
    loader = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)
    batch = loader.global_batch_at(0)
    assert (batch.input_ids[:, 0] == FIM_P).all()
    for r in range(len(batch)):
        ids = batch.input_ids[r].tolist()
        assert ids.index(FIM_P) < ids.index(FIM_S) < ids.index(FIM_M)


# ------------------------------------------------------------------------------------------------ packings


def test_stream_packing(tmp_path):
    dirs = make_dirs(tmp_path, {"web": make_docs(40, 1, 1, 8), "code": make_docs(40, 2, 1, 8)})
    for boundary in ("masked", "kept"):
        spec, plan = make_spec([phase("a", 3, {"web": 0.5, "code": 0.5})], packing="stream", boundary=boundary)
        batch = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS).global_batch_at(1)
        assert (batch.doc_ids == 0).all()
        assert (batch.position_ids == torch.arange(16)).all()
        at_eos = batch.input_ids == EOS
        assert at_eos.any()
        if boundary == "masked":
            assert ((batch.targets == IGNORE_INDEX) == at_eos).all()
        else:
            assert (batch.targets != IGNORE_INDEX).all()


def test_document_packing_rows(two_phase):
    spec, plan, dirs = two_phase
    batch = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS).global_batch_at(2)
    for r in range(len(batch)):
        ids, pos, doc = batch.input_ids[r], batch.position_ids[r], batch.doc_ids[r]
        for i in range(1, len(ids)):
            new = bool(ids[i - 1] == EOS)
            assert int(doc[i]) == int(doc[i - 1]) + new
            assert int(pos[i]) == (0 if new else int(pos[i - 1]) + 1)
        assert ((batch.targets[r] == IGNORE_INDEX) == (ids == EOS)).all()


def test_none_packing(tmp_path):
    docs = {"web": make_docs(30, 1, 1, 40), "code": make_docs(30, 2, 1, 40)}
    dirs = make_dirs(tmp_path, docs)
    spec, plan = make_spec(
        [phase("a", 4, {"web": 0.5, "code": 0.5}), phase("b", 2, {"web": 0.5, "code": 0.5})], packing="none"
    )
    loader = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)
    length = loader.seq_len
    seen = {0: [], 1: []}
    for s in range(loader.steps):
        batch = loader.global_batch_at(s)
        assert (batch.doc_ids == 0).all() and (batch.position_ids == torch.arange(length)).all()
        in_step = {0: [], 1: []}
        for r in range(len(batch)):
            si, k = int(batch.source_index[r]), int(batch.stream_start[r])
            in_step[si].append(k)
            stream = loader.streams[si]
            doc = docs[loader.source_names[si]][int(stream.epoch(k // stream.n_docs).perm[k % stream.n_docs])]
            n = min(len(doc), length + 1)
            ids, targets = batch.input_ids[r].tolist(), batch.targets[r].tolist()
            assert ids[: min(n, length)] == doc[: min(n, length)]
            assert ids[n:] == [EOS] * (length - n)  # padding
            assert targets[: n - 1] == doc[1:n]
            assert targets[n - 1 :] == [IGNORE_INDEX] * (length - n + 1)
        for si in seen:
            seen[si] += sorted(in_step[si])  # shuffled within a step
    for si in seen:  # document k of the stream, each once, step after step
        assert seen[si] == list(range(len(seen[si])))
    nxt = PhaseLoader(build_loader_config(spec, plan, 1), dirs, IDS)
    assert nxt.source_tokens_consumed(1) == {n: len(seen[i]) for i, n in enumerate(loader.source_names)}


def test_seed_changes_order(two_phase, tmp_path):
    spec, plan, dirs = two_phase
    other_spec, other_plan = make_spec(
        [phase("a", 12, {"web": 0.5, "code": 0.3, "books": 0.2}), phase("b", 6, {"web": 0.25, "code": 0.75})], seed=8
    )
    a = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS).global_batch_at(0)
    b = PhaseLoader(build_loader_config(other_spec, other_plan, 0), dirs, IDS).global_batch_at(0)
    assert not torch.equal(a.input_ids, b.input_ids)
    assert stable_seed(1, "x") == stable_seed(1, "x") != stable_seed(1, "y")


def test_a_phase_seed_reorders_the_epochs_it_begins_and_no_other(tmp_path):
    """phases[].seed: the documents of the epoch in progress that earlier phases have not read, the epochs the
    phase begins and its batches are drawn by the phase's seed, and no document repeats or is skipped; the
    phase before it is untouched, and a seed equal to the run's changes nothing."""
    phases = [phase("a", 12, {"web": 0.5, "code": 0.3, "books": 0.2}), phase("b", 6, {"web": 0.25, "code": 0.75})]
    spec, plan = make_spec(phases)
    seeded_spec, seeded_plan = make_spec([phases[0], {**phases[1], "seed": 99}])
    same_spec, same_plan = make_spec([phases[0], {**phases[1], "seed": 7}])  # the run's own seed
    dirs = make_dirs(tmp_path, {"web": make_docs(40, 1), "code": make_docs(10, 2), "books": make_docs(40, 3)})
    assert build_loader_config(seeded_spec, seeded_plan, 0) == build_loader_config(spec, plan, 0)
    assert build_loader_config(same_spec, same_plan, 1) == build_loader_config(spec, plan, 1)
    config = build_loader_config(seeded_spec, seeded_plan, 1)
    assert config.phase_seed == 99 and "phase_seed" not in build_loader_config(spec, plan, 1).model_dump()
    plain, seeded = PhaseLoader(build_loader_config(spec, plan, 1), dirs, IDS), PhaseLoader(config, dirs, IDS)
    code_plain, code_seeded = (ld.streams[ld.source_names.index("code")] for ld in (plain, seeded))
    start, end, length = config.stream_starts["code"], config.stream_ends["code"], code_plain.epoch_tokens
    current, offset = divmod(start, length)
    assert offset and end > (current + 1) * length  # b ends an epoch begun in a, and begins another
    for e in range(current):
        assert code_seeded.epoch(e).perm.tolist() == code_plain.epoch(e).perm.tolist()
    ours, theirs = code_seeded.epoch(current), code_plain.epoch(current)
    read = int(np.searchsorted(theirs.cum, offset, "right"))  # documents a read (the last one partly)
    assert 0 < read < 9 and ours.perm[:read].tolist() == theirs.perm[:read].tolist()
    assert sorted(ours.perm[read:].tolist()) == sorted(theirs.perm[read:].tolist())  # no repeat, no skip
    assert ours.perm[read:].tolist() != theirs.perm[read:].tolist()
    within = np.arange(start, current * length + int(ours.cum[read]))  # the rest of the document a was in
    assert code_seeded.tokens_at(within).tolist() == code_plain.tokens_at(within).tolist()
    perm = code_seeded.epoch(current + 1).perm.tolist()
    assert sorted(perm) == list(range(10)) and perm != code_plain.epoch(current + 1).perm.tolist()
    assert not torch.equal(plain.global_batch_at(0).input_ids, seeded.global_batch_at(0).input_ids)


def test_speed(tmp_path):
    """A demo step (16 sequences of 257 tokens, FIM on one source) in well under 10 ms once warm."""
    docs = {"web": make_docs(300, 1, 1, 600), "code": make_docs(300, 2, 1, 600), "books": make_docs(300, 3, 1, 30)}
    dirs = make_dirs(tmp_path, docs)
    spec, plan = make_spec(
        [phase("a", 50, {"web": 0.5, "code": 0.4, "books": 0.1})],
        seq_len=256,
        micro=8,
        accum=1,
        devices=2,
        fim={"rate": 0.5, "spm_rate": 0.5},
    )
    loader = PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS)
    assert loader.global_batch == 16
    for s in range(5):
        loader.global_batch_at(s)
    times = []
    for s in range(50):
        t0 = time.perf_counter()
        loader.global_batch_at(s)
        times.append(time.perf_counter() - t0)
    assert float(np.median(times)) < 0.010


def test_special_ids_by_token_name(two_phase):
    from runlib.tokenizer.special import special_ids

    spec, plan, dirs = two_phase
    by_name = PhaseLoader(build_loader_config(spec, plan, 0), dirs, special_ids(256)).global_batch_at(1)
    assert_batches_equal(by_name, PhaseLoader(build_loader_config(spec, plan, 0), dirs, IDS).global_batch_at(1))


def test_mixture_segments():
    """A batch ramp inside a phase: the closed form per segment, the counts summing to each segment's B."""
    m = Mixture({"a": 0.75, "b": 0.25}, [Segment(0, 3, 4), Segment(3, 0, 6), Segment(3, 2, 8)])
    assert [m.batch_size(s) for s in range(6)] == [4, 4, 4, 8, 8, 8]
    assert [sum(m.counts(s)) for s in range(6)] == [4, 4, 4, 8, 8, 8]
    assert m.cum(3) == [9, 3] and m.cum(5) == [9 + 12, 3 + 4] and m.cum(6) == [9 + 18, 3 + 6]
