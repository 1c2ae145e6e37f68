"""The stage graph of a spec: stage configs built from the spec and its plan, nodes and their keys, the runner of
one stage instance, and what is built of it."""
