"""Tools that read trained image models (e.g. `posemb`: JSL22 Figures 1a/5c); a run loads with
`posattn.vision.checkpoint.load_run`."""
