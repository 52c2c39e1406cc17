"""The HTTP boundary: the FastAPI app and its request models, the process `Settings` (the only
place OPTU_* variables are read, besides the CLI), authentication, size limits, Prometheus
metrics and the result cache. It turns requests into explicit options and profiles for
`service.optimizer` and maps client mistakes to 4xx answers."""
