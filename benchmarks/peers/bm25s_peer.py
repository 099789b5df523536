"""bm25s (Lù 2024) with PyStemmer: Lucene BM25 variant, k1=1.5, b=0.75 (its defaults), English stopwords."""

import time
from importlib.metadata import version

import bm25s
import Stemmer
from _bundle import main


def configs(bundle, k):
    def build():
        start = time.perf_counter()
        stemmer = Stemmer.Stemmer("english")
        retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
        retriever.index(bm25s.tokenize(bundle.doc_texts, stopwords="en", stemmer=stemmer, show_progress=False),
                        show_progress=False)
        index_s = time.perf_counter() - start
        ids = bundle.doc_ids

        def search(i):
            tokens = bundle.query_texts[i]
            q = bm25s.tokenize([tokens], stopwords="en", stemmer=stemmer, show_progress=False)
            n = min(k, len(ids))
            docs, _ = retriever.retrieve(q, k=n, show_progress=False, n_threads=1)
            return [ids[j] for j in docs[0]]

        return search, index_s

    yield "bm25", build


if __name__ == "__main__":
    main("bm25s", version("bm25s"), configs)
