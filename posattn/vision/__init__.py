"""Image regime of JSL22 (SPEC 2): ViTs with positional or vanilla attention, CNNs, input, training."""
