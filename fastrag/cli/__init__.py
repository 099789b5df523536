"""The ``fastrag`` command line: index files, search them, answer questions with an LLM, evaluate on BEIR data.

Exit codes: 0 success (including a search that matched nothing, or a question with no sources, which say
so); 1 invalid input (a bad filter, regex, parameter or setting, or no LLM configured for ``ask``) or files
that failed to index; 2 command-line usage error; 3 the store failed or cannot be opened (the message
names the store; ``ask`` then never calls the LLM), or a remote embedding endpoint failed (the message names
it); 4 the LLM endpoint failed (``ask``).
"""

from fastrag.cli import evaluate, index, search, serving  # noqa: F401 - each registers its commands on main
from fastrag.cli.app import main

__all__ = ["main"]
