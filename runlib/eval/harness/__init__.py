"""lm-evaluation-harness (EleutherAI, https://github.com/EleutherAI/lm-evaluation-harness) on a phase's model.

    taskfiles   lm-eval YAML task files written from runlib's items: a runlib task (JSONL or built from a
                source's held-out documents) and runlib's synthetic arithmetic tasks  (pure, no lm_eval import)
    gate        what cannot run here, refused before any job starts, with the fix   (no lm_eval/torch import)
    run         the eval stage's edge: export the phase as a Hugging Face checkpoint (runlib.export.hf),
                run lm_eval.simple_evaluate on it with the `hf` model type, read back the scores

`python -m runlib.eval.harness DIR` writes runlib's built-in task files into DIR, for
`lm_eval --model hf --model_args pretrained=EXPORT --include_path DIR --tasks runlib_arith_add`.
"""
