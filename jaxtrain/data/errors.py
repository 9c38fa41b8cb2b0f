"""The error type of the data layer."""


class DataError(ValueError):
    """Tokenized data that cannot be read as asked; the message names the file and the fix."""
