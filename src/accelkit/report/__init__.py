"""Rendering plans and runs for people (tables) and scripts (JSON)."""
