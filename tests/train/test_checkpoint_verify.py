"""Resumable (DCP) checkpoints are verified: a truncated or bit-flipped newest checkpoint is skipped with one
warning line, and resume and rollback fall back to the newest one that verifies. A
planted checkpoint never runs code: digests.json is authenticated (HMAC under the
manifest key) before anything is unpickled, and .metadata is read through an allow-list unpickler."""

import json
import os
import pickle
import shutil
import threading

import pytest
import torch

from runlib.train import dist_checkpoint as dcp_ckpt
from runlib.util.hashing import file_digest, file_sha256
from runlib.util.mac_key import KEY_FILE_ENV


def tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, optimizer


def train_step(model, optimizer, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    loss = model(torch.randn(8, 16, generator=g)).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@pytest.fixture
def scratch(tmp_path):
    """step-1, step-2, step-3 of one short run, each with its step in extra."""
    model, optimizer = tiny()
    for step in (1, 2, 3):
        train_step(model, optimizer, step)
        dcp_ckpt.save_checkpoint(tmp_path / f"step-{step}", model, optimizer, {"state": {"step": step}})
    return tmp_path


def largest_shard(directory):
    return max((p for p in directory.iterdir() if p.suffix == ".distcp"), key=lambda p: p.stat().st_size)


def flip_bytes(path, offset: int, count: int = 64) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        data = f.read(count)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))


def truncate(path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def test_save_records_every_file_of_the_checkpoint(scratch):
    step = scratch / "step-3"
    record = json.loads((step / dcp_ckpt.DIGESTS).read_text())
    files = sorted(p.name for p in step.iterdir() if p.name != dcp_ckpt.DIGESTS)
    assert sorted(record["files"]) == files and {".metadata", dcp_ckpt.EXTRA} <= set(files)
    assert sorted(record) == ["algorithm", "files", "hmac_sha256"]
    for name, entry in record["files"].items():
        sha = {"sha256": file_sha256(step / name)} if name == ".metadata" else {}
        assert entry == {"bytes": (step / name).stat().st_size, "digest": file_digest(step / name), **sha}
    assert dcp_ckpt.verify_checkpoint(step) is None
    assert sorted(p.name for p in scratch.iterdir()) == ["step-1", "step-2", "step-3"]  # no tmp left


CORRUPTIONS = {
    "truncated shard": lambda d: truncate(largest_shard(d)),
    "flipped shard bytes": lambda d: flip_bytes(largest_shard(d), 200),
    "flipped extra.pt bytes": lambda d: flip_bytes(d / dcp_ckpt.EXTRA, 40, 8),
    "truncated metadata": lambda d: truncate(d / ".metadata"),
    "no digests": lambda d: (d / dcp_ckpt.DIGESTS).unlink(),
    "garbled digests": lambda d: (d / dcp_ckpt.DIGESTS).write_text("{not json"),
    "missing shard": lambda d: largest_shard(d).unlink(),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_resume_falls_back_to_the_newest_checkpoint_that_verifies(scratch, corrupt, capsys):
    corrupt(scratch / "step-3")
    assert dcp_ckpt.verify_checkpoint(scratch / "step-3") is not None
    found = dcp_ckpt.latest_checkpoint(scratch)
    assert found == scratch / "step-2"
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "step-3" in warning[0] and "trying the one before it" in warning[0]
    # and the fallback really loads: step 2's extra, its weights equal a fresh run's after 2 steps
    model, optimizer = tiny()
    assert dcp_ckpt.load_checkpoint(found, model, optimizer)["state"]["step"] == 2
    ref, ref_opt = tiny()
    for seed in (1, 2):
        train_step(ref, ref_opt, seed)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values(), strict=True))


def test_every_corrupt_newer_checkpoint_is_skipped_with_one_line_each(scratch, capsys):
    truncate(largest_shard(scratch / "step-3"))
    flip_bytes(largest_shard(scratch / "step-2"), 100)
    assert dcp_ckpt.latest_checkpoint(scratch) == scratch / "step-1"
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "step-3" in lines[0] and "step-2" in lines[1]
    assert "bytes, recorded" in lines[0] and "content digest" in lines[1]
    truncate(scratch / "step-1" / dcp_ckpt.EXTRA)
    assert dcp_ckpt.latest_checkpoint(scratch) is None  # nothing verifies: the phase starts over
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("no older one")


def test_rollback_limit_also_skips_corrupt_checkpoints(scratch, capsys):
    flip_bytes(scratch / "step-2" / ".metadata", 16, 8)
    assert dcp_ckpt.latest_checkpoint(scratch, at_most_step=2) == scratch / "step-1"
    assert dcp_ckpt.latest_checkpoint(scratch, at_most_step=3) == scratch / "step-3"
    assert "step-2" in capsys.readouterr().err


def test_a_resave_replaces_a_corrupt_checkpoint(scratch):
    truncate(largest_shard(scratch / "step-3"))
    model, optimizer = tiny()
    dcp_ckpt.load_checkpoint(dcp_ckpt.latest_checkpoint(scratch), model, optimizer)
    train_step(model, optimizer, 3)
    dcp_ckpt.save_checkpoint(scratch / "step-3", model, optimizer, {"state": {"step": 3}})
    assert dcp_ckpt.latest_checkpoint(scratch) == scratch / "step-3"


class RunsCode:
    """What a planted .metadata pickles: unpickling it calls os.system."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def plant(scratch, tmp_path, digests: str, monkeypatch):
    """step-4: step-3's files with a .metadata that runs `touch <tmp>/pwned`, and a digests.json that is
    `digests`: "valid" (written with the key, as by someone holding it), "another key" or "no mac" (the
    digests recomputed by someone without the key)."""
    planted, pwned = scratch / "step-4", tmp_path / "pwned"
    shutil.copytree(scratch / "step-3", planted)
    (planted / ".metadata").write_bytes(pickle.dumps(RunsCode(f"touch {pwned}")))
    if digests == "another key":
        monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "attacker.key"))
    dcp_ckpt.write_digests(planted)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    if digests == "no mac":
        record = json.loads((planted / dcp_ckpt.DIGESTS).read_text())
        del record["hmac_sha256"]
        (planted / dcp_ckpt.DIGESTS).write_text(json.dumps(record))
    return planted, pwned


PLANTED = {
    "valid": "refused to unpickle (global posix.system is not one that DCP checkpoint metadata holds)",
    "another key": "digests.json does not match the manifest key",
    "no mac": "digests.json has no hmac_sha256",
}


@pytest.mark.parametrize("digests", PLANTED)
def test_a_planted_checkpoint_is_refused_and_runs_nothing(scratch, tmp_path, monkeypatch, capsys, digests):
    planted, pwned = plant(scratch, tmp_path, digests, monkeypatch)
    assert dcp_ckpt.latest_checkpoint(scratch) == scratch / "step-3"  # resume passes over it
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and f"skipping corrupt checkpoint {planted}" in warning[0]
    assert PLANTED[digests] in warning[0]
    model, optimizer = tiny()
    with pytest.raises(dcp_ckpt.UnsafeCheckpointError, match=r"step-4/\.metadata: refused to unpickle"):
        dcp_ckpt.load_checkpoint(planted, model, optimizer)  # loaded directly, unverified: still refused
    assert not pwned.exists()


def test_the_allow_list_admits_what_the_trainer_writes(scratch):
    """Every global a real checkpoint's .metadata names is admitted (and at least the DCP classes are
    needed): a recording unpickler lists them."""
    seen = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add((module, name))
            return super().find_class(module, name)

    with open(scratch / "step-3" / ".metadata", "rb") as f:
        Recording(f).load()
    assert ("torch.distributed.checkpoint.metadata", "Metadata") in seen and ("torch", "Size") in seen
    unpickler = dcp_ckpt.MetadataUnpickler(open(os.devnull, "rb"))
    assert all(unpickler.find_class(module, name) is not None for module, name in seen)
    assert dcp_ckpt.read_metadata(scratch / "step-3" / ".metadata").state_dict_metadata


def test_a_background_save_holds_the_state_of_its_step_and_appears_only_when_committed(tmp_path):
    """checkpoint.async_save: the state is copied when the save starts, so training on does not leak into it;
    the directory appears (digested, verifiable) only at commit, so a kill before it leaves the older ones."""
    model, optimizer = tiny()
    train_step(model, optimizer, 1)
    writer = dcp_ckpt.BackgroundWriter.start()
    gate = threading.Event()
    writer.executor.submit(gate.wait)  # the write waits behind it: it runs after the next step, deterministically
    pending = dcp_ckpt.save_checkpoint(tmp_path / "step-1", model, optimizer, {"state": {"step": 1}}, background=writer)
    assert pending is not None and not (tmp_path / "step-1").exists()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    train_step(model, optimizer, 2)  # changes the live tensors before the write runs
    gate.set()
    pending.commit()
    assert dcp_ckpt.verify_checkpoint(tmp_path / "step-1") is None
    assert dcp_ckpt.latest_checkpoint(tmp_path) == tmp_path / "step-1"
    restored, restored_optimizer = tiny()
    extra = dcp_ckpt.load_checkpoint(tmp_path / "step-1", restored, restored_optimizer)
    assert extra["state"]["step"] == 1
    for name, tensor in restored.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    writer.executor.shutdown()
