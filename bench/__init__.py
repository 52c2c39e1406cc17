"""Benchmark zoo and scripts."""
