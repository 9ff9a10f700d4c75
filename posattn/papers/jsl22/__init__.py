"""JSL22's study of its theory regime (`posattn.theory`): the claims beyond a single run, as measurements
with verdicts.

`phases` (the proof sketch's three phases measured on a GD history), `run_report` (the report of
`experiments/theory.py`), `glm` (Theorem 3.1's lower bound), `construction` (Theorem 3.2), `transfer`
(Theorem 5.1), `overlay` ((E) approaching (P)), `sweep` (Theorem 4.2's sample sizes), `reproduce` and
`report` (every claim from one command, `experiments/reproduce.py`); the paper's numbers and stated
results in `published`.
"""
