"""Extracted term -> kernel program -> runnable JAX, and translation validation."""
