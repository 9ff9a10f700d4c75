"""Tools that read trained image models; a run loads with `posattn.vision.checkpoint.load_run`.

`posemb`: positional-embedding similarity (JSL22 Figures 1a/5c). PK22's measurements, one tool a module:
`hessian` (Fig. 2), `fourier` (Fig. 4), `frequency_noise` (Fig. 5), `variance` (Fig. 6), `landscape`
(Fig. 1); `suite` runs them all on one model, `claims` sets them beside PK22's numbers and `pk22_report`
writes the report of `experiments/how_vits_work.py` (docs/how_vits_work.md).
"""
