"""Translation validation: is the optimized program the original's equal? Value numbering pairs
their values, regions are checked apart, verdicts say whether the check could tell; the debugger's
kernel-by-kernel checks and the explained kernel listing sit here too. Above lowering, below the
optimizer, which only calls it."""
