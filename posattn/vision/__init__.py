"""Image regime of JSL22 (SPEC 2): ViTs with vanilla or positional attention, CNN baselines, input, training."""
