"""PK22's study ("How do ViTs work?", `experiments/how_vits_work.py`): its measurements, made by the tools
of `posattn.analysis`, on several trained models, set beside the paper's numbers.

`how_vits_work` (the binary's config and its checks), `suite` (every measurement of one model), `claims`
(the rows: claim, PK22's number, ours) and `report` (trains, measures, writes docs/how_vits_work.md's
report); the paper's numbers in `published`.
"""
