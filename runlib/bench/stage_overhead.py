"""Benchmark a stage job's fixed cost: CPU-seconds of `runlib <stage>` processes against `python -c pass`.

    python -m runlib.bench.stage_overhead [--pairs 7] [--spec tests/fixtures/tiny.yaml] [--repo DIR] [--track]

What it measures, in a temporary work directory, interleaved (peer, built, peer, build, ...), --pairs
times each, median CPU-seconds (user + system, of the process and its children, from wait4):
    python -c pass   the interpreter alone (the peer)
    built            `python -m runlib curate-shard --key K` whose artifact is already built: the job a
                     rerun after a kill or a second spec sharing the artifact starts; all of it is fixed cost
    build            the same job on the spec's last curation shard (tiny.yaml: its smallest) after
                     deleting its artifact: a small curate_shard, fixed cost plus a little work
With --track, also one `runlib track --resync` over the artifacts built so far, and a second one that
finds them recorded: what MLflow costs now that stage jobs do not import it (the workflow's track rule).
--repo runs another checkout's runlib (e.g. a `git worktree` of the commit before) to compare code paths.
Goal: a stage job's fixed cost under 0.5 CPU-s above the interpreter (was 3.3 s, 85% MLflow).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def cpu_seconds(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """User + system CPU-seconds of `cmd` and its children (wait4's rusage); fails loudly on a non-zero exit."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(output.decode(errors="replace")[-3000:])
        raise SystemExit(f"stage_overhead: {' '.join(cmd)} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def stage_keys(python: str, repo: Path, spec: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """The spec's stages as the measured checkout computes them (its keys may differ from this one's)."""
    out = subprocess.run(
        [python, "-m", "runlib", "plan", str(spec), "--format", "json"],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    stages: list[dict[str, Any]] = json.loads(out.stdout)["stages"]
    return stages


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--spec", type=Path, default=ROOT / "tests" / "fixtures" / "tiny.yaml")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose runlib runs (default this one)")
    parser.add_argument("--track", action="store_true", help="also time `runlib track --resync` (imports mlflow)")
    args = parser.parse_args(argv)
    python, repo, spec = sys.executable, args.repo.resolve(), args.spec.resolve()
    with tempfile.TemporaryDirectory(prefix="stage-overhead-") as tmp:
        work = Path(tmp) / "work"
        env = {**os.environ, "RUNLIB_WORK_DIR": str(work), "PYTHONPATH": str(repo), "RUNLIB_SPEC": str(spec)}
        env.pop("MLFLOW_TRACKING_URI", None)  # the SQLite store in the temporary work directory
        shards = [s for s in stage_keys(python, repo, spec, env) if s["stage"] == "curate_shard"]
        if len(shards) < 2:
            raise SystemExit(f"stage_overhead: {spec} has {len(shards)} curation shard(s); it needs 2")

        def job(key: str) -> list[str]:
            return [python, "-m", "runlib", "curate-shard", "--key", key]

        built, small = shards[0], shards[-1]  # tiny.yaml: docs/0, and arithmetic/0 (its smallest source)
        cpu_seconds(job(built["key"]), env, repo)  # built once; every later run finds it built
        small_dir = work / "artifacts" / "curate_shard" / small["key"]

        times: dict[str, list[float]] = {"python -c pass": [], "built": [], "build": []}
        for _ in range(args.pairs):
            times["python -c pass"].append(cpu_seconds([python, "-c", "pass"], env, repo))
            times["built"].append(cpu_seconds(job(built["key"]), env, repo))
            times["python -c pass"].append(cpu_seconds([python, "-c", "pass"], env, repo))
            shutil.rmtree(small_dir, ignore_errors=True)
            times["build"].append(cpu_seconds(job(small["key"]), env, repo))
        med = {k: statistics.median(v) for k, v in times.items()}
        base = med["python -c pass"]
        print(f"runlib at {repo}; {spec.name}; median CPU-s (user+sys) of {args.pairs} interleaved pairs:")
        print(f"  {'python -c pass':<38} {base:6.3f} s")
        for name, label in (("built", f"built ({built['instance']})"), ("build", f"build ({small['instance']})")):
            print(f"  {label:<38} {med[name]:6.3f} s   {med[name] - base:+6.3f} s above the interpreter")
        print(f"  fixed cost (built - pass): {med['built'] - base:.3f} CPU-s (goal < 0.5)")
        if args.track:
            resync = [python, "-m", "runlib", "track", "--resync", str(spec)]
            med["track first"] = cpu_seconds(resync, env, repo)
            med["track again"] = cpu_seconds(resync, env, repo)
            print(
                f"  runlib track --resync: {med['track first']:.3f} s recording {len(shards)} shards, "
                f"{med['track again']:.3f} s finding them recorded (one process per phase, not per stage)"
            )
    return med


if __name__ == "__main__":
    main()
