"""Architectures and their audit taps; importing the package registers every model (zoo, then VFL)."""
from . import vfl, zoo  # noqa: F401
