"""LWLC23's study: the claims of its shallow-ViT regime (`posattn.shallow`) and its deeper-ViT experiment
on token grids of real images (`posattn.vision`, `posattn.vision.data.token_grid`), with verdicts.

`report` (the claims of `experiments/shallow_vit.py`), `grid_experiment` (one cell of
`experiments/token_grid.py`: train, then measure with `posattn.analysis.slot_attention`) and
`grid_report` (its claims); the paper's numbers in `published`.
"""
