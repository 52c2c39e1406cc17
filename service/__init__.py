"""The optimizer service: the pipeline and its search, workers, the HTTP app, the client and the CLI."""

VERSION = "0.1.0"
