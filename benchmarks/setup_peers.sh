#!/usr/bin/env bash
# Make one virtual environment per peer under benchmarks/.cache/venvs/ (git-ignored), from PyPI.
# Their dependencies clash (LangChain, LlamaIndex and Haystack pin different pydantic/numpy/nltk ranges),
# so each gets its own. No peer ever downloads a model: the benchmarks pass precomputed vectors.
set -euo pipefail
cd "$(dirname "$0")/.cache" 2>/dev/null || { mkdir -p "$(dirname "$0")/.cache"; cd "$(dirname "$0")/.cache"; }
mkdir -p venvs && cd venvs
make_venv() { [ -x "$1/bin/python" ] || python3 -m venv "$1"; "$1/bin/pip" install -q --upgrade pip; }
make_venv bm25s      && bm25s/bin/pip install -q bm25s PyStemmer numpy
make_venv langchain  && langchain/bin/pip install -q "langchain<1" "langchain-community<1" rank_bm25 numpy
make_venv llamaindex && llamaindex/bin/pip install -q llama-index-core llama-index-retrievers-bm25 numpy
make_venv haystack   && haystack/bin/pip install -q haystack-ai numpy
for v in bm25s langchain llamaindex haystack; do echo "$v: $("$v/bin/pip" freeze | grep -i -E '^(bm25s|langchain|langchain-community|langchain-core|rank.bm25|llama-index-core|llama-index-retrievers-bm25|haystack-ai|pystemmer)=' | tr '\n' ' ')"; done
