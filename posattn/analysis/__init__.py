"""Tools that read trained image models; a run loads with `posattn.vision.runs.load_run`.

`posemb`: positional-embedding similarity (JSL22 Figures 1a/5c). PK22's measurements, one tool a module:
`hessian` (Fig. 2), `fourier` (Fig. 4), `frequency_noise` (Fig. 5), `variance` (Fig. 6), `landscape`
(Fig. 1), and `objective`, the NLL + L2 that the Hessian and the landscape measure; `subject`: the
protocol by which any model (a user's flax model, an imported timm checkpoint) runs through them;
`slot_attention`: a ViT's attention on labelled token slots and attention-based token pruning (LWLC23). The studies that run them and set them beside the papers' numbers are
`posattn.papers.pk22` and `posattn.papers.lwlc23`.
"""
