"""What the Snakefile needs: stage keys, artifact paths, the stage graph of a spec, the gate."""
