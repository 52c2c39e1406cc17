"""Extracted term -> kernel program -> runnable JAX (and Pallas kernels)."""
