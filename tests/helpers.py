"""Helpers shared by the tests: a fake but valid manifest, and the check that a hostile input is refused.

The `work` and `hang_guard` fixtures built on these live in tests/conftest.py.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from runlib.errors import UserError
from runlib.store.manifest import Manifest, Timings, write_manifest
from runlib.store.node import StageNode
from tests.limits import HANG_GUARD_S

DATA_STAGES = ("curate_shard", "dedup_partition", "curate_source", "filter_shard", "train_tokenizer", "tokenize")
"""The stage kinds of the tiny and demo specs before training, in build order (no quality filter)."""

EXIT_USER_ERROR = 2
"""runlib's exit status for an input it refuses (runlib.cli; 1 means the audit found errors)."""


# ------------------------------------------------------------------------------------ fake manifests


def fake_manifest(
    node: StageNode | None = None,
    *,
    counts: dict[str, Any] | None = None,
    details: dict[str, Any] | None = None,
    started_at: float = 1.7e9,
    wall_seconds: float = 1.0,
    **fields: Any,
) -> Manifest:
    """A well-formed Manifest of an artifact with no files: `node`'s stage, instance, key, config and inputs
    (stage and instance 'x', key 0 x 16, no config nor inputs without a node), the given counts and details,
    timings from `started_at` and `wall_seconds`, a content hash of its own per key; `fields` set any
    Manifest field, those above included (stage, key, content_hash, libraries, input_digests, ...)."""
    identity: dict[str, Any] = {"stage": "x", "instance": "x", "key": "0" * 16, "config": {}, "inputs": {}}
    if node is not None:
        identity = {
            "stage": node.stage,
            "instance": node.instance,
            "key": node.key,
            "config": node.config.model_dump(mode="json"),
            "inputs": node.inputs,
        }
    values: dict[str, Any] = {
        **identity,
        "counts": counts or {},
        "details": details or {},
        "timings": Timings(started_at=started_at, wall_seconds=wall_seconds),
        "libraries": {},
        "outputs": {},
        **fields,
    }
    values.setdefault("content_hash", f"hash-{values['key']}")
    return Manifest(**values)


def write_fake_manifest(directory: str | Path, node: StageNode | None = None, **manifest: Any) -> Path:
    """Write fake_manifest(node, **manifest) into `directory` (created if missing) with runlib's own writer,
    so that its checksum and MAC verify as a built artifact's do (runlib.store.manifest.read_manifest
    refuses any other); returns the manifest's path."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    return write_manifest(directory, fake_manifest(node, **manifest))


# ------------------------------------------------------------------------------------ hostile inputs


class Hang(BaseException):
    """Raised by hang_guard. Not an Exception, and so not an OSError as TimeoutError is: no `except OSError`
    or `except Exception` of the code under test turns a hang into the refusal the test expects."""


@contextmanager
def hang_guard(seconds: int = int(HANG_GUARD_S)) -> Iterator[None]:
    """Fail, instead of hanging the suite, when the body still runs after `seconds` (tests/limits.py: far
    above the slowest run, a guard and never a timing bound): SIGALRM's handler raises Hang, which also
    ends a blocked open() or read() (PEP 475: a handler that raises ends the retried system call), e.g. the
    open() of a FIFO that no writer opens. The main thread only (signal(2))."""

    outer = signal.alarm(0)  # the seconds left of a guard around this one (0: none)
    started = time.monotonic()
    limit = min(seconds, outer) if outer else seconds  # inside another guard, the sooner one holds

    def fire(signum: int, frame: object) -> None:
        raise Hang(f"still running after {limit} s: a read without a bound, or one that waits")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # the outer guard runs on, not cancelled by this one's end
            signal.alarm(max(1, outer - math.ceil(time.monotonic() - started)))


def assert_clear(message: str, named: Sequence[str], max_chars: int | None = None) -> None:
    """`message` names each of `named`, holds no traceback and, given `max_chars`, is shorter (a message that
    quotes a hostile value whole is not one a person can read)."""
    missing = [n for n in named if n not in message]
    assert not missing, f"the message does not name {missing}: {message[:3000]}"
    assert "Traceback" not in message, message[:3000]
    if max_chars is not None:
        assert len(message) < max_chars, f"{len(message)} characters: {message[:3000]}"


def refused(
    call: Callable[[], object],
    *named: str,
    error: type[Exception] = UserError,
    match: str | None = None,
    max_chars: int | None = None,
) -> str:
    """Run `call()` under a hang guard; it must raise `error` (a UserError, which the CLI turns into exit 2)
    whose message matches `match` (a regex, searched) and is clear (assert_clear); returns the message."""
    with hang_guard(), pytest.raises(error, match=match) as info:
        call()
    message = str(info.value)
    assert_clear(message, named, max_chars)
    return message


def cli_refused(argv: Sequence[str], capsys: pytest.CaptureFixture[str], *named: str) -> str:
    """Run `runlib <argv>` in this process (runlib.cli.main) under a hang guard: it must exit 2 with a clear
    message on stderr (assert_clear); returns stderr."""
    from runlib.cli import main

    capsys.readouterr()  # what earlier calls printed is not this command's
    with hang_guard():
        status = main(list(argv))
    err = capsys.readouterr().err
    assert status == EXIT_USER_ERROR, f"exit {status} of runlib {' '.join(argv)}: {err[:3000]}"
    assert_clear(err, named)
    return err
