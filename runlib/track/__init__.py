"""MLflow tracking (runlib.track.mlflow_track). The only package that imports mlflow; stage commands import it.

Metric names: one name per quantity, "/"-separated (MLflow's UI groups charts by the first part), the same
name in a stage's child run and in the spec's parent run, so runs compare by name:

  train/loss, train/loss/<source>      train_phase: mean training loss over each logging interval
                                       (monitor.log_every, in tokens); step = the optimizer step
  train/lr, train/grad_norm            train_phase: the interval's last step
  train/tokens, train/tokens_per_s, train/mfu
  train/heldout_loss/<source>          train_phase: held-out loss during training (monitor.eval_every)
  heldout/<source>/<loss|perplexity|bits_per_byte|tokens>
                                       eval_phase, step = the phase index; the parent: the latest phase's
  task/<task>/<metric>                 eval_phase: acc, acc_norm, loglik_per_token, n, ...
  stage/wall_seconds                   every child: the build's wall time
  count/<name>, detail/<path>          every child: its manifest's counts and numeric details, less what the
                                       stage logs above already (the final loss, tokens, loss by source)
  train/device_hours, plan/device_hours  the parent: measured (train phases' wall x processes) and planned
                                       device-hours (core-hours on a CPU run: tag runlib.accelerator)
  run/wall_seconds                     the parent: first build's start to last build's end (its span)
"""
