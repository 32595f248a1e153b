"""`accelkit.torch.tune` and ``fit(tune=...)``: the fit's options measured on the user's
own model. `tuner` runs the trials, `trials` holds their protocol, limits and result,
`trial_guards` what stops a trial, `levers` the DDP candidates and `optimizers` the
optimizer's implementation switched in place. A tuner works on the fit's `Step`
(`accelkit.torch.training.step`); the loop runs it without importing it.
"""
