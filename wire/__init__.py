"""The `optu.jaxpr/v1` wire format, the bottom layer: everything that knows how a jaxpr maps to
JSON and back. `format` holds the schema (programs, tensors, literals, arrays as base64),
`params` the codec of primitive params, `capture` turns a JAX function into a wire program, and
`execute` runs (and type-checks) a wire program as JAX. Nothing here imports the optimizer."""
