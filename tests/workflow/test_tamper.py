"""A tamper that reseals the manifest: a token shard poisoned and its manifest's file
digest, content hash and checksum rewritten. Without the key the MAC refuses it on every read; with the key
(or before any MAC) the chain refuses it: the phase that read the shard recorded other digests. The key file
(runlib.util.mac_key): another key refuses every manifest, creation is race-free, bad key files are exit 2."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runlib.cli import main
from runlib.errors import UserError
from runlib.graph.build import build_graph
from runlib.graph.stages import run_stage
from runlib.spec import load_spec
from runlib.store.artifacts import build_artifact, content_hash, input_record, verify_artifact
from runlib.store.manifest import CHECKSUM_FIELD, MAC_FIELD, _canonical, read_manifest
from runlib.util.hashing import bytes_digest, file_digest, hmac_sha256
from runlib.util.mac_key import KEY_FILE_ENV, read_key
from tests.conftest import ROOT
from tests.helpers import DATA_STAGES
from tests.limits import HANG_GUARD_S
from tests.workflow.conftest import TINY


@pytest.fixture(scope="session")
def graph():
    return build_graph(load_spec(TINY).spec)


@pytest.fixture(scope="session")
def built(tmp_path_factory, graph) -> Path:
    """The tiny spec's data stages, and phase 0 built from them with a stand-in final.pt (recording what
    it read, as run_stage does), under the default key."""
    work = tmp_path_factory.mktemp("tamper") / "work"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUNLIB_WORK_DIR", str(work))
        for stage in DATA_STAGES:
            for node in graph.of(stage):
                run_stage(stage, str(TINY), node.key)
        first = graph.find("train_phase", phase=0)
        read = {role: input_record(n.stage, read_manifest(n.dir)) for role, n in graph.input_nodes(first).items()}
        build_artifact(first, stand_in_phase, read)
    return work


def stand_in_phase(tmp: Path) -> dict:
    (tmp / "final.pt").write_bytes(b"\x80\x02weights" * 512)  # no stage reads it here
    return {"counts": {}}


@pytest.fixture
def work(built, tmp_path, monkeypatch) -> Path:
    copy = shutil.copytree(built, tmp_path / "work")
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(copy))
    return copy


def poison_and_reseal(directory: Path, name: str, key: bytes | None) -> None:
    """The issue's tamper: overwrite a file, then rewrite its digest, the content hash and the checksum in the
    manifest (and, given the key, the MAC; without it the old MAC stays)."""
    path = directory / name
    data = bytearray(path.read_bytes())
    data[: len(data) // 2] = bytes(len(data) // 2)  # the first half of the shard zeroed: token 0 everywhere
    path.write_bytes(bytes(data))
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest.pop(CHECKSUM_FIELD)
    mac = manifest.pop(MAC_FIELD)
    manifest["outputs"][name] = {"xxh3_128": file_digest(path), "bytes": path.stat().st_size}
    manifest["content_hash"] = content_hash(manifest["outputs"])
    canonical = _canonical(manifest)
    manifest[CHECKSUM_FIELD] = bytes_digest(canonical)
    manifest[MAC_FIELD] = hmac_sha256(key, canonical) if key is not None else mac
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


def test_a_resealed_token_shard_without_the_key_is_refused_by_every_read(work, graph, capsys):
    tokens, second = graph.find("tokenize", source="code"), graph.find("train_phase", phase=1)
    poison_and_reseal(tokens.dir, "train.bin", key=None)
    with pytest.raises(UserError, match=f"its {MAC_FIELD} does not match the manifest key") as err:
        read_manifest(tokens.dir)
    assert str(tokens.manifest_path) in str(err.value) and f"rm -r {tokens.dir}" in str(err.value)
    with pytest.raises(UserError, match=rf"artifact tokenize/{tokens.key} \(tokenize code/0\): manifest\.json: its"):
        run_stage("train_phase", str(TINY), second.key)
    assert not second.dir.exists()
    assert main(["verify", str(TINY)]) == 2
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  FAILED")]
    assert len(failed) == 2 and "tokenize code/0" in failed[0] and "train_phase foundation" in failed[1]


def test_a_resealed_token_shard_with_the_key_is_refused_by_the_chain(work, graph, capsys):
    """Someone holding the key (or a runlib without MACs) reseals the shard: it verifies against its own
    manifest, but phase 0 recorded reading other bytes, so `runlib verify` and phase 1 refuse it."""
    tokens, first, second = (
        graph.find("tokenize", source="code"),
        graph.find("train_phase", phase=0),
        graph.find("train_phase", phase=1),
    )
    poison_and_reseal(tokens.dir, "train.bin", key=read_key())
    assert verify_artifact(tokens.dir).ok  # the artifact alone cannot tell
    problems = verify_artifact(first.dir).problems
    assert len(problems) == 1 and problems[0].startswith(
        f"input tokens:code/0 (tokenize/{tokens.key}): not what this artifact was built from (train.bin: digest now "
    )
    with pytest.raises(UserError) as err:
        run_stage("train_phase", str(TINY), second.key)
    assert str(err.value).startswith(f"artifact train_phase/{first.key} (train_phase foundation): input tokens:code/0")
    assert f"rm -r {tokens.dir}" in str(err.value) and not second.dir.exists()
    assert main(["verify", str(TINY)]) == 2
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("  FAILED")]
    assert len(failed) == 1 and "train_phase foundation" in failed[0]
    assert "train.bin: digest now" in out


def test_a_reseal_further_upstream_stops_the_stage(work, graph):
    """A curated source resealed (with the key) after the tokenizer read it: phase 1 reads neither, and
    still refuses to run, naming the tokenizer whose record no longer matches."""
    curated, tokenizer = graph.find("filter_shard", source="docs", shard=0), graph.of("train_tokenizer")[0]
    poison_and_reseal(curated.dir, "train.jsonl", key=read_key())
    with pytest.raises(UserError) as err:
        run_stage("train_phase", str(TINY), graph.find("train_phase", phase=1).key)
    message = str(err.value)
    assert message.startswith(f"artifact train_tokenizer/{tokenizer.key} (train_tokenizer): input source:docs/0")
    assert "train.jsonl: digest now" in message


def test_a_manifest_without_a_mac_or_under_another_key_is_refused(work, graph, tmp_path, monkeypatch, capsys):
    tok = graph.of("train_tokenizer")[0]
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "other" / "manifest.key"))  # created on first use
    with pytest.raises(
        UserError, match=f"does not match the manifest key {tmp_path / 'other' / 'manifest.key'}"
    ) as err:
        read_manifest(tok.dir)
    assert "(created just now: the key these manifests were written under is gone)" in str(err.value)
    assert main(["verify", str(TINY), "--stage", "train_tokenizer"]) == 2
    assert "its manifest_hmac_sha256 does not match" in capsys.readouterr().out
    monkeypatch.delenv(KEY_FILE_ENV)
    data = json.loads(tok.manifest_path.read_text())
    del data[MAC_FIELD]  # as an older runlib wrote it
    tok.manifest_path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=f"no {MAC_FIELD} \\(written by a runlib before manifests were authenticated"):
        read_manifest(tok.dir)


def test_the_key_file_is_created_once_by_racing_processes(tmp_path):
    key = tmp_path / "cfg" / "runlib" / "manifest.key"
    env = {**os.environ, KEY_FILE_ENV: str(key)}
    code = "from runlib.util.mac_key import read_key; print(read_key().hex())"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    keys = {p.communicate(timeout=HANG_GUARD_S)[0].strip() for p in procs}
    assert [p.returncode for p in procs] == [0] * 6
    assert keys == {key.read_bytes().hex()} and len(key.read_bytes()) == 32
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in key.parent.iterdir()) == ["manifest.key"]  # no temporary file left


BAD_KEYS = {
    "readable by others": (lambda p: (p.write_bytes(b"k" * 32), p.chmod(0o644)), "chmod 600"),
    "too short": (lambda p: (p.write_bytes(b"k" * 8), p.chmod(0o600)), "holds 8 bytes"),
    "a fifo": (lambda p: os.mkfifo(p, 0o600), "is not a regular file"),
    "a folder": (lambda p: p.mkdir(mode=0o700), "is not a regular file"),
}


@pytest.mark.parametrize("make, says", BAD_KEYS.values(), ids=BAD_KEYS.keys())
def test_a_bad_key_file_is_a_clear_error_naming_it(work, tmp_path, monkeypatch, capsys, make, says):
    key = tmp_path / "bad.key"
    make(key)
    monkeypatch.setenv(KEY_FILE_ENV, str(key))
    assert main(["verify", str(TINY), "--stage", "train_tokenizer"]) == 2
    err = capsys.readouterr().err
    assert f"{key}: manifest key file" in err and says in err and "Traceback" not in err


def test_an_input_rebuilt_to_equal_results_keeps_its_consumers_valid(work, graph):
    """No false alarm: a deleted artifact rebuilt (as the rebuild advice does) to the same bytes leaves its
    consumers' records matching; a phase's measurement files may differ."""
    tokens, first, second = (
        graph.find("tokenize", source="code"),
        graph.find("train_phase", phase=0),
        graph.find("train_phase", phase=1),
    )
    shutil.rmtree(tokens.dir)
    run_stage("tokenize", str(TINY), tokens.key)
    assert verify_artifact(first.dir).ok

    def phase_with_throughput(tokens_per_s: float):
        def build(tmp: Path) -> dict:
            stand_in_phase(tmp)
            (tmp / "metrics.jsonl").write_text(json.dumps({"step": 1, "tokens_per_s": tokens_per_s}) + "\n")
            return {"counts": {}}

        return build

    shutil.rmtree(first.dir)
    build_artifact(first, phase_with_throughput(1000.0))
    build_artifact(second, stand_in_phase, {"previous": input_record("train_phase", read_manifest(first.dir))})
    shutil.rmtree(first.dir)
    build_artifact(first, phase_with_throughput(1234.5))  # rebuilt: the same weights at another speed
    assert verify_artifact(second.dir).ok
    poison_and_reseal(first.dir, "final.pt", key=read_key())  # other weights, a matching manifest: a rebuild
    problems = verify_artifact(second.dir).problems  # other weights: what phase 1 trained from is gone
    assert len(problems) == 1 and "(final.pt: digest now" in problems[0]
