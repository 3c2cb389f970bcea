"""The one error type that reaches users as a one-line message and exit code 2."""


class UsageError(Exception):
    """Bad input from the user: the message names the key, the value and what is allowed."""
