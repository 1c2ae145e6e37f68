rule export_hf:
    """A phase's final model as a Hugging Face checkpoint (not part of `all`; ask for it):
    snakemake --cores 2 exports/<run>/<phase>   (runlib export: safetensors, config.json, tokenizer)"""
    input:
        WF.export_inputs,
    output:
        directory(WF.export_dir()),
    log:
        WF.log("export", "{phase}"),
    resources:
        mem_mb=8000,
        runtime=30,
    shell:
        '"$RUNLIB_PYTHON" -m runlib export "$RUNLIB_SPEC" --phase {wildcards.phase:q} --out {output:q} > {log:q} 2>&1'
