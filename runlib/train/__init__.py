"""Training phases: the Accelerate loop, its accumulation arithmetic, checkpoints, spike policy."""
