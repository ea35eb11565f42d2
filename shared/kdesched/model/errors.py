"""The one error type of the model layer: bad input that names where it is."""

from __future__ import annotations

from kdesched.errors import CannotRun


class ModelError(CannotRun, ValueError):
    """An object or file could not be turned into records.

    ``where`` names the place (file, document, item, object and field) so that the CLI can print
    one line an operator can act on, and exit 2.
    """

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message

    def within(self, prefix: str) -> ModelError:
        """The same error, located inside ``prefix`` (e.g. the file and item it came from)."""
        return ModelError(f"{prefix}: {self.where}" if self.where else prefix, self.message)
