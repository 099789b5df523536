"""The old home of the search settings: everything here is :mod:`fastrag.settings` (import it from there)."""

from fastrag.settings import *
from fastrag.settings import __all__  # noqa: F401
