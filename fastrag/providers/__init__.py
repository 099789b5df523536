"""The HTTP clients of the model APIs, shared by the chat client, the embedders and the rerankers.

- :mod:`fastrag.providers.openai`: :class:`~fastrag.providers.openai.OpenAICompatibleClient`, one
  OpenAI-compatible endpoint over ``httpx`` (:class:`~fastrag.llm.OpenAICompatibleLLM`'s
  ``/chat/completions``, :class:`~fastrag.ingestion.steps.openai_compatible.OpenAICompatibleEmbedder`'s
  ``/embeddings``);
- :mod:`fastrag.providers.cohere`: :class:`~fastrag.providers.cohere.CohereClient`, Cohere's API through its
  SDK (:class:`~fastrag.ingestion.steps.cohere.CohereEmbedder`'s ``/v2/embed``,
  :class:`~fastrag.rerankers.cohere.CohereReranker`'s ``/v2/rerank``);
- :mod:`fastrag.providers.http`: what both map the same way: HTTP statuses and ``httpx`` exceptions to
  fastrag's errors, the limits on a timeout, and how a message shows a value or an answer.

Each client checks its configuration when built (base URL, key, headers, timeout), makes one attempt per call
(retries are the caller's :class:`~fastrag.retry.RetryPolicy`), raises only fastrag's errors, each naming the
endpoint, and never shows the key. The classes users build stay where they were; these modules import none
of them (``tests/test_import_cycles.py``).
"""
