"""The one error type that means "the user asked for something invalid"."""


class ConfigError(ValueError):
    """Invalid configuration or input: binaries report it in one line and exit with status 2."""
