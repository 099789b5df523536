"""``python -m fastrag.cli``: the command line."""

from fastrag.cli import main

main()
