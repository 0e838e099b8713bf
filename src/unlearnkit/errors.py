"""Errors a user can act on. The CLI prints their message on one line and exits with code 2."""


class UserError(ValueError):
    """Bad input (unknown name, impossible forget set, wrong checkpoint...): one clear line, no traceback.

    A :class:`ValueError` (README and docs/usage.md promise it): ``except ValueError`` catches every refusal
    of a user's value, from the Python API as from the command line's checks."""


class UnknownNameError(UserError, KeyError):
    """A registry lookup failed; the message carries a did-you-mean suggestion."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0] if self.args else ""


class DataUnavailableError(UserError):
    """A dataset is not on disk and downloading was not allowed."""


class CheckpointError(UserError):
    """A checkpoint is corrupt, truncated, or of another architecture / class count."""


class NonFiniteLossError(RuntimeError):
    """A method produced NaN/inf; the model would be silently broken, so the method stops."""


class WriteFailed(OSError):
    """A file could not be written (a full disk, a quota, a read-only file system, a lost permission): its
    ``filename`` names the file, ``errno`` / ``strerror`` say why. Nothing partial is left (an atomic write
    removes its temp file). The CLI prints one ``error:`` line and exits with code 1 (not the input's fault)."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"
