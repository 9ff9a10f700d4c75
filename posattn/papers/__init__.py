"""Each paper's study, one package per paper: its drivers, claim checks and verdicts, report writers,
and every number it publishes (`published`, the one place each paper's numbers live).

- `jsl22`: Jelassi, Sander, Li (2022), "Vision Transformers provably learn spatial structure";
- `lwlc23`: Li, Wang, Liu, Chen (2023), shallow ViTs (token data, sample complexity, sparsification);
- `pk22`: Park, Kim (2022), "How do Vision Transformers work?".

Why a package of its own (big_vision's `proj/`): the tool packages (`posattn.theory`, `shallow`,
`vision`, `analysis`) hold what research code reuses (data, models, training, metrics, measurements),
and a study is one use of them. Kept apart, a tool never imports a study (tests/test_layout.py checks
it), a study's published numbers and verdict thresholds are found in one place per paper instead of
beside the code they test, and a new measurement is its module in `analysis` plus the study that uses
it. Packages are named by the papers' citation keys, as the docstrings everywhere cite them; a study
may import matplotlib (through `posattn.plots`), a tool may not.
"""
