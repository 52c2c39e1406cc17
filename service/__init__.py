"""The optimizer service, in two layers and a top: `optimizer` (the pipeline and its search, run in
worker processes) below `http` (the FastAPI boundary, settings, cache, metrics), with the `client`
(a jit-like wrapper, in-process or over HTTP) and the `optu` command line (`cli`) on top."""

VERSION = "0.1.0"
