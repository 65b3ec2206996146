"""Named errors of the training package."""
from rhea.errors import RheaConfigError, RheaError


class TrainingDataError(RheaError, ValueError):
    """A training file or record is malformed, or in a format rhea cannot read."""


class TrainConfigError(RheaConfigError):
    """A training config has an unknown key or a value out of range."""


class NonFiniteTrainingError(RheaError, FloatingPointError):
    """Training produced a non-finite loss or gradient norm for too many steps in a row."""
