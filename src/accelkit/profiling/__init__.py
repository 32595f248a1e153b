"""Profiling: step timing, FLOPs counted per step, achieved FLOP/s against peak."""
