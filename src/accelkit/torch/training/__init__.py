"""The parts `accelkit.torch.fit` walks: `prepare` (the model and the data as the loop
trains them), `step` (one training step as the plan sets it up) and `loop` (the epochs,
measured step by step). The fit itself, which joins them to the meter and the tuner, is
`accelkit.torch.fitting`.
"""
