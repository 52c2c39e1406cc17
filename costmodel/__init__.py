"""Hardware profiles (TOML), per-node cost formulas and extraction for the OPTU cost model."""
