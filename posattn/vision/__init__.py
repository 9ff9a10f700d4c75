"""Image regime of JSL22: ViTs with positional or vanilla attention and CNN baselines, trained on images.

config (the schema of `tpu_configs/`), setup (a config resolved once), resume, losses, optim, state,
checkpoint (incl. `load_run`), train, sweep, timm_import (timm ViT and ResNet checkpoints as posattn's
models); models/ and data/ are packages of their own.
"""
