"""Backends: the outside services every layer above may call.

- `rhea.backends.llm`: the `TextGenerator` protocol (a local HF model, an OpenAI-compatible
  endpoint, a scripted stand-in for tests);
- `rhea.backends.embedding`: sentence embedders (`Embedder`);
- `rhea.backends.retrieval`: lexical retrieval (`BM25Retriever`);
- `rhea.backends.chat_template`: the chat template used when a tokenizer has none.

Nothing here imports the rest of rhea except `rhea.errors` and `rhea.constants`.
"""

#: The backends are used as modules (``from rhea.backends.llm import HFGenerator``): importing this
#: package re-exports nothing, so it loads no model library.
__all__: list[str] = []
