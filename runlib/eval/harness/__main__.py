"""`python -m runlib.eval.harness DIR`: write runlib's built-in lm-eval tasks (runlib_arith_mc,
runlib_arith_loglik) into DIR, for `lm_eval --model hf --model_args pretrained=EXPORT --include_path DIR
--tasks runlib_arith_mc` on a checkpoint written by `runlib export`."""

from __future__ import annotations

import sys
from pathlib import Path

from runlib.eval.harness.taskfiles import write_builtin_tasks


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print(
            "usage: python -m runlib.eval.harness DIR   (writes runlib's lm-eval task files into DIR)", file=sys.stderr
        )
        return 2
    for task, path in write_builtin_tasks(Path(args[0])).items():
        print(f"{task}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
