"""The e-graph side of the optimizer: term language, jaxpr ingest, rule families and schedules."""
