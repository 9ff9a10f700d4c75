"""JSL22's study of its theory regime (`posattn.theory`): the claims beyond a single run, as measurements
with verdicts.

`phases` (the proof sketch's three phases measured on a GD history), `theory_run` and `run_report` (the
run of `experiments/theory.py` and its report), `phase_three` (`experiments/phase_three.py`), `glm` (Theorem 3.1's lower bound), `construction` (Theorem 3.2), `transfer`
(Theorem 5.1), `overlay` ((E) approaching (P)), `sweep` (Theorem 4.2's sample sizes), `reproduce` and
`report` (every claim from one command, `experiments/reproduce.py`); its image experiments: `permuted`
(Figure 5), `attention_comparison` (Figures 6-7), their tables in `image_tables`, and `posemb_similarity`
(Figures 1a and 5c); the paper's numbers and stated results in `published`.
"""
