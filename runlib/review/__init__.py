"""Review a run like code: pure layers over the spec, its plan, its audit and its stage graph.

- runlib.review.diff: `runlib diff A B`, what a spec change does (fields, plan, findings, stages that rerun);
- runlib.review.shrink: `runlib shrink SPEC`, the same run's structure scaled down to run on this machine.

None of them imports torch, accelerate or mlflow (`runlib diff` and `runlib shrink` are review commands).
"""
