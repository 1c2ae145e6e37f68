"""The store: machine-local settings, stage keys, manifests and content-addressed artifacts, verified when read."""
