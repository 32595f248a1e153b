"""Data parallelism in PyTorch: the process group, DDP, the sampler and the per-rank
figures (`parallel`); how the fit wraps the model in DDP (`wrapping`); the timing of the
gradient all-reduce (`communication`), also for a trainer's own DDP (`trainer_timing`).
"""
