"""Which languages an embedding model was trained for: the table of known models and the declaration every
built-in embedder makes when it is constructed.

A hybrid search leaves its dense branch out of a question whose language the embedder does not cover
(:func:`fastrag.retrieval.hybrid.uncovered_dense_branches`; ``docs/multilingual.md``): an English model's
vectors for Arabic, Korean or Japanese are close to noise (all-MiniLM-L6-v2 alone scores 0.03 nDCG@10 on
Arabic questions, and fused it pulled the hybrid 0.020 to 0.056 below keyword search; issue 25). For that
the embedder must say which languages it covers: every built-in embedder has a ``languages`` attribute
(:class:`fastrag.protocols.DeclaresLanguages`), taken from ``languages=`` when given, else from
:data:`MODEL_LANGUAGES` by model. A model in neither is **unknown**: constructing its embedder warns
(:class:`UnknownLanguagesWarning`), and the dense branch then runs on questions in every language, as it
always did.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from fastrag.analysis import language_code
from fastrag.errors import InvalidParameterError

__all__ = ["MODEL_LANGUAGES", "UnknownLanguagesWarning", "declared_languages"]

_ENGLISH = frozenset({"en"})

# sentence-transformers' model card of paraphrase-multilingual-MiniLM-L12-v2 and -mpnet-base-v2 (trained
# on parallel data for these 50+ languages; fr-ca, pt-br, zh-cn and zh-tw fold into fr, pt and zh)
_PARAPHRASE_MULTILINGUAL = frozenset({
    "ar", "bg", "ca", "cs", "da", "de", "el", "en", "es", "et", "fa", "fi", "fr", "gl", "gu", "he", "hi",
    "hr", "hu", "hy", "id", "it", "ja", "ka", "ko", "ku", "lt", "lv", "mk", "mn", "mr", "ms", "my", "nb",
    "nl", "pl", "pt", "ro", "ru", "sk", "sl", "sq", "sr", "sv", "th", "tr", "uk", "ur", "vi", "zh",
})

MODEL_LANGUAGES: Mapping[str, frozenset[str]] = MappingProxyType({
    # the shipped static models, distilled from all-MiniLM-L6-v2 (its WordPiece vocabulary strips accents
    # and spells most other scripts a character at a time)
    "static-minilm-d256": _ENGLISH,
    "static-minilm-d64": _ENGLISH,
    # sentence-transformers/all-MiniLM-L6-v2: trained on English sentence pairs only (its model card)
    "all-MiniLM-L6-v2": _ENGLISH,
    "sentence-transformers/all-MiniLM-L6-v2": _ENGLISH,
    "paraphrase-multilingual-MiniLM-L12-v2": _PARAPHRASE_MULTILINGUAL,
    "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2": _PARAPHRASE_MULTILINGUAL,
    "paraphrase-multilingual-mpnet-base-v2": _PARAPHRASE_MULTILINGUAL,
    "sentence-transformers/paraphrase-multilingual-mpnet-base-v2": _PARAPHRASE_MULTILINGUAL,
    # Model2Vec's English models (distilled from bge-base-en-v1.5; minishlab's model cards)
    **{f"minishlab/potion-base-{size}": _ENGLISH for size in ("2M", "4M", "8M", "32M")},
    "minishlab/potion-retrieval-32M": _ENGLISH,
    # BAAI's English BGE models and nomic-embed-text (their model cards: English training data), as
    # OpenAI-compatible servers (TEI, Ollama) name them
    **{f"BAAI/bge-{size}-en-v1.5": _ENGLISH for size in ("small", "base", "large")},
    "nomic-embed-text": _ENGLISH,
    # Cohere's English embedding models (docs.cohere.com, "Embed models"); its multilingual ones name
    # "100+ languages" without a list, so they stay unknown unless declared
    "embed-english-v3.0": _ENGLISH,
    "embed-english-light-v3.0": _ENGLISH,
    "embed-english-v2.0": _ENGLISH,
    "embed-english-light-v2.0": _ENGLISH,
})
"""The languages (ISO 639-1) of known embedding models, by model id as the embedders take it (a model
folder's name, a sentence-transformers or Hugging Face id, a Cohere model). A model known to be
multilingual but without a published list (OpenAI's text-embedding-3 models, Cohere's embed-v4.0 and
multilingual models, multilingual-e5) is not here: declare its languages with ``languages=``."""


class UnknownLanguagesWarning(UserWarning):
    """An embedder was built over a model whose languages are unknown: a hybrid search runs its dense branch
    on questions in every language (pass ``languages=`` to the embedder to declare them)."""


def declared_languages(
    model: str | Sequence[str], languages: Iterable[str] | None, *, embedder: str
) -> frozenset[str] | None:
    """The languages an embedder over ``model`` covers, for its ``languages`` attribute.

    Args:
        model: the model id as the embedder was given it, or several names of it tried in turn (each also
            without a leading folder path: ``/models/static-minilm-d256`` is ``static-minilm-d256``).
        languages: what the caller declared (language tags such as ``"en"``, ``"pt-BR"``), or ``None``
            to look ``model`` up in :data:`MODEL_LANGUAGES`.
        embedder: the embedder's class name, for messages.

    Returns:
        The ISO 639-1 codes (``"pt-BR"`` -> ``"pt"``), or ``None`` when ``model`` is unknown and nothing
        was declared; an :class:`UnknownLanguagesWarning` then says so (once per call site).

    Raises:
        InvalidParameterError: ``languages`` is a string (not a collection of codes), empty, or holds
            something that is not a registered language tag (:func:`fastrag.analysis.language_code`).
    """
    if languages is not None:
        if isinstance(languages, str | bytes):
            raise InvalidParameterError(f"languages must be a collection of language codes such as {{'en', 'de'}}, "
                                        f"got the string {languages!r}")
        try:
            given = list(languages)
        except TypeError:
            raise InvalidParameterError(f"languages must be a collection of language codes, got {languages!r}") from None
        codes = [language_code(tag) for tag in given]
        bad = [tag for tag, code in zip(given, codes, strict=True) if code is None]
        if bad or not given:
            raise InvalidParameterError(f"languages must be registered language codes such as 'en' or 'pt-BR', got "
                                        f"{sorted(map(repr, bad)) if bad else 'none'}")
        return frozenset(c for c in codes if c is not None)
    names = [model] if isinstance(model, str) else list(model)
    known = None
    for name in names:
        known = MODEL_LANGUAGES.get(name)
        if known is None and "/" in name:  # a model folder path: its name (static-minilm-d256)
            known = MODEL_LANGUAGES.get(name.rstrip("/").rsplit("/", 1)[-1])
        if known is not None:
            break
    model = names[0]
    if known is None:
        warnings.warn(
            f"{embedder}: the languages of the model {model!r} are unknown, so a hybrid search runs its dense "
            "branch on questions in every language (an English model on Arabic questions only adds noise); "
            f"declare them with {embedder}(..., languages={{'en', ...}})",
            UnknownLanguagesWarning,
            stacklevel=3,
        )
    return known
