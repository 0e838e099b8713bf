"""``python -m unlearnkit.cli``: the same command line as ``unlearnkit``."""
from . import main

main()
