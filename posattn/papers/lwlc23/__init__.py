"""LWLC23's study: the claims of its shallow-ViT regime (`posattn.shallow`) and its deeper-ViT experiment
on token grids of real images (`posattn.vision`, `posattn.vision.data.token_grid`), with verdicts.

`shallow_study` (the run of `experiments/shallow_vit.py`) and `report` (its claims), `settle_study` (the run
of `experiments/shallow_settle.py`: a study of `settle`, summarised by `settle_report`), `grid_study` (the
run of `experiments/token_grid.py`), `grid_experiment` (one cell of it: train, then measure with
`posattn.analysis.slot_attention`) and `grid_report` (its claims); the paper's numbers in `published`.
"""
