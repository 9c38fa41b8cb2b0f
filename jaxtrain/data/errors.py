"""The error type of the data layer."""

from jaxtrain.errors import JaxtrainError


class DataError(JaxtrainError, ValueError):
    """Tokenized data that cannot be read as asked; the message names the file and the fix."""
