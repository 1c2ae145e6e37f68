"""The steps of `runlib shrink` (runlib.review.shrink runs them in order, and documents what each keeps):

- shape: the model shape for the minutes asked, the model, tokenizer, parallelism and precision sections;
- data: the sources, each file source that is not here replaced by a builtin stand-in of its domain;
- timeline: the phases in steps, the batch ramp placed on the shrunk run, the schedule in percent of it;
- evaluation: the checkpoint cadence, the monitor, the evaluation tasks that run offline, the ladder;
- ignores: the shrunk spec's audit.ignore (SHRINK_CHOICES);
- output: the shrunk spec as commented YAML.
"""
