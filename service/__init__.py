"""HTTP boundary of the optimizer: wire schema, capture, app, pipeline, client, CLI."""
