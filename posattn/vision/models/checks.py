"""Checks of the fields every classifier has, run when a model is constructed (however it is built)."""
from posattn.errors import ConfigError


def check_classifier_fields(num_classes: int, dropout: float) -> None:
    """ConfigError unless num_classes >= 1 and 0 <= dropout < 1."""
    if int(num_classes) < 1:
        raise ConfigError(f"num_classes must be a positive integer, got {num_classes!r}")
    if not 0.0 <= float(dropout) < 1.0:
        raise ConfigError(f"model.dropout must be in [0, 1), got {dropout}")
