"""`accelkit.torch.Meter` (`meter`, with `meter_guard` for the steps it counts) and the
facts about a PyTorch model, optimizer and loader that the advisor reads (`facts`).
"""
