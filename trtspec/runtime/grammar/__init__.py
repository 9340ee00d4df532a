"""Structured output under speculation: a request's grammar (a JSON schema, any JSON object) holds
at every token the engine commits, whatever drafted it.

- `compile.py`: a `GrammarSpec` (what the caller asked for) compiled once per request with
  xgrammar against the engine's tokenizer and vocabulary (`compile_grammar`); a schema that cannot
  compile raises GrammarError (one line, the caller's 400).
- `matcher.py`: `SequenceGrammar`, one per sequence (batched requests never share one): before
  verification it cuts a chain draft at its first token the grammar rejects (a tree: drops that
  node and its subtree) and records the allowed tokens at every verify row; after acceptance it
  advances over the committed tokens only. The matcher walks the draft and rolls back, so it
  never holds a token that was not committed.
- `masking.py`: the target's logits and the draft's probabilities restricted to the allowed
  tokens (greedy: argmax over them; sampling: the masked, renormalized distributions, the draft's
  masked the same way), so speculative output equals constrained non-speculative output token for
  token (greedy) and in distribution (sampling).

This room knows nothing about models, caches or drafters' internals; the loop (trtspec.runtime.loop.step)
calls it between drafting and verifying, and when it commits.
"""
