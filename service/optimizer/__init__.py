"""The optimizer core: `pipeline.optimize` takes a wire program, a hardware profile and explicit
`OptimizeOptions`, and returns the optimized program with its kernels, estimates and validation.
It owns the search (one e-graph per piece, under one budget), partitioning of repeated layers,
control flow and loop hoisting, background validation, the worker processes that run requests
under deadlines, and the profile sweep. It reads no process settings: callers pass what it needs."""
