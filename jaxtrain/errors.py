"""The errors jaxtrain reports to its users, at the bottom of the package (it imports nothing).

Each is raised with a message that names the setting, file or value at fault and the fix. The
command line prints any `JaxtrainError` as one line, `jaxtrain <command>: error: <message>`, and
exits 2; a notebook sees the exception. Each layer defines its own subclass next to its code
(`DataError`, `CheckpointError`, `MeshError`, ...); `ConfigError` lives here because every layer
raises it.
"""


class JaxtrainError(Exception):
    """An error the user can fix; its message says how."""


class ConfigError(JaxtrainError, ValueError):
    """A config setting that cannot work; the message names the key, its value and a fix."""
