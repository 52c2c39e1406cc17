"""Example models used by the benchmarks and end-to-end tests."""
