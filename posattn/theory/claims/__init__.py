"""JSL22's claims beyond the core run: the GLM lower bound (Theorem 3.1), generalising without patch
association (Theorem 3.2), transfer (Theorem 5.1), (E) approaching (P) (`overlay`), the sample-size
sweep (Theorem 4.2), and the reproduction report that measures them all (`reproduce`, `report`)."""
