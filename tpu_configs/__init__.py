"""ml_collections config files of the image regime (`--config=tpu_configs/NAME.py[:ARG]`).

Loaded by path, not imported; the package marker lets setup.py install them as `posattn.tpu_configs`,
so `posattn.cli.find_config_file` finds them from any directory.
"""
