"""EAGLE-3 drafter, read natively from ModelOpt's `export_speculative_decoding` output.

The checkpoint (config.json `LlamaForCausalLMEagle3`; safetensors `fc`, `layers.N.*` with
`layers.0.hidden_norm`, `norm`, `lm_head`, optional `d2t`) is loaded into plain transformers
Llama layers; ModelOpt is never imported at run time. Semantics follow ModelOpt's
`HFEagleModel.pseudo_speculative_generate` exactly:

- the target's outputs of layers `eagle_config.eagle_aux_hidden_state_layer_ids` (0-based, i.e.
  `hidden_states[i + 1]`) are concatenated and projected by `fc`;
- EAGLE position i takes the embedding (the target's embed_tokens) of token i + 1 and fc(aux_i);
- the first layer's attention input is cat(input_layernorm(embeds), hidden_norm(input_layernorm(h)))
  (ModelOpt's pre-hook normalizes the already input-normalized hidden state), its residual is h;
  heads imported from other tools say in config.json which function their tool computes
  (HEAD_FORWARDS: EAGLE's hidden_norm(h), speculators' norm_before_residual);
- each further draft step feeds the drafted token with the EAGLE layer's own pre-norm output
  at the previous position; logits come from lm_head(norm(h)) (+ d2t when the draft vocab is
  smaller).

With a static tree (eagle_choices) and greedy decoding, the session fills the tree depth by depth
(one EAGLE pass per depth, tree attention mask over its own cache); under sampling it proposes
its top chain, which rejection sampling verifies losslessly. With a dynamic tree (TreeShape) each
session grows its own EAGLE-2 tree, greedy or sampled (trtspec.runtime.drafters.eagle3_tree).

Batched: `propose_batch` runs ONE head forward per draft position for all sessions (the first
also catches each session up on the positions the target verified since its last proposal), on
the head's own paged KV cache (trtspec.runtime.forward.batch's Layout, the target's block tables). Each
session's cache holds committed positions only; drafted positions are rolled back after each
proposal and recomputed from the target's real hidden states once verified. On the direct route
(eagle3_forward) the rows of catch-ups, chain steps and tree levels get their attention layout
written straight into the compiled kernel's arrays (head_layout).
"""

from __future__ import annotations

import json
from pathlib import Path

from trtspec.errors import ModelSourceError
from trtspec.runtime.drafters.base import ChainDrafts, Draft, Drafter, DraftSession
from trtspec.runtime.drafters.eagle3_tree import propose_dynamic_trees, propose_trees
from trtspec.runtime.drafters.head_feed import HeadFeed
from trtspec.runtime.verify import sampling
from trtspec.runtime.verify.tree import Tree, TreeShape

CONFIG_DROP = ("architectures", "eagle_config", "draft_vocab_size", "torch_dtype", "transformers_version",
               "trtspec_head_forward")
# The function of the first layer, as each tool computes it (config.json `trtspec_head_forward`,
# written by trtspec.convert.eagle3.heads for imported heads; absent = trtspec's own, ModelOpt's):
#   modelopt              attention reads cat(ln(embeds), hidden_norm(ln(h))), residual h
#   eagle                 attention reads cat(ln(embeds), hidden_norm(h)), residual h (EAGLE, SpecForge,
#                         TensorRT-LLM, SGLang, vLLM / speculators norm_before_residual false)
#   norm_before_residual  as eagle, residual hidden_norm(h) (speculators / vLLM norm_before_residual true)
HEAD_FORWARDS = ("modelopt", "eagle", "norm_before_residual")


def _build_head(config_dict: dict, state: dict):
    """The EAGLE-3 module as torch layers, weights loaded strictly from `state`."""
    import torch
    from torch import nn
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

    settings = {k: v for k, v in config_dict.items() if k not in CONFIG_DROP}
    rope = settings.pop("rope_scaling", None) or {}
    theta = settings.pop("rope_theta", None) or rope.get("rope_theta", 10000.0)
    settings["rope_parameters"] = {**{"rope_type": "default"}, **rope, "rope_theta": theta}
    config = LlamaConfig(**settings)
    config._attn_implementation = "sdpa"
    hidden = config.hidden_size

    head = nn.Module()
    head.config = config
    head.layers = nn.ModuleList([LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
    first = head.layers[0].self_attn
    for name in ("q_proj", "k_proj", "v_proj"):
        old = getattr(first, name)
        setattr(first, name, nn.Linear(2 * hidden, old.out_features, bias=config.attention_bias))
    head.layers[0].hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
    head.fc = nn.Linear(state["fc.weight"].shape[1], hidden, bias="fc.bias" in state)
    head.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
    head.lm_head = nn.Linear(hidden, state["lm_head.weight"].shape[0], bias=False)
    d2t = state.pop("d2t", None)
    head.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    head.d2t = d2t.long() if d2t is not None else None
    head.rotary_emb = LlamaRotaryEmbedding(config=config)
    head.forward_kind = config_dict.get("trtspec_head_forward") or "modelopt"
    if head.forward_kind not in HEAD_FORWARDS:
        raise ModelSourceError(f"EAGLE-3 head: trtspec_head_forward {head.forward_kind!r} is not one of "
                               f"{', '.join(HEAD_FORWARDS)}", fix="re-import the head with trtspec convert --head")
    return head.eval().to(torch.float32)


class Eagle3Drafter(Drafter):
    kind = "eagle3"
    # the direct route's rows get their attention layout from head_layout (catch-ups, chain steps,
    # tree levels); False: Layout.build, as the module route (to compare the two)
    lean_layout = True
    _d2t: tuple = (None, None)  # (head.d2t, the same as a list): draft ids as ints mapped without torch

    def __init__(self, head, embed_tokens, aux_layer_ids: list[int]):
        from trtspec.runtime.forward.attention import use_paged_attention

        use_paged_attention(head)
        self.head = head
        self.embed_tokens = embed_tokens
        self.kv_config = head.config
        # indices into the target's hidden_states tuple (index 0 is the embedding output)
        self.aux_layer_ids = tuple(i + 1 for i in aux_layer_ids)
        self._direct: bool | None = None  # eagle3_forward.supports(head), asked on the first forward

    @classmethod
    def from_dir(cls, path: Path, target) -> Eagle3Drafter:
        from safetensors.torch import load_file

        path = Path(path)
        config = json.loads((path / "config.json").read_text())
        if "LlamaForCausalLMEagle3" not in (config.get("architectures") or []):
            raise ModelSourceError(f"{path}: not an EAGLE-3 export (architectures {config.get('architectures')})",
                                   fix="export with modelopt's export_speculative_decoding (trtspec convert)")
        eagle = config.get("eagle_config") or {}
        if not eagle.get("use_aux_hidden_state", False):
            raise ModelSourceError(f"{path}: eagle_config.use_aux_hidden_state is false (EAGLE-1/2, not EAGLE-3)",
                                   fix="convert with ModelOpt's EAGLE3_DEFAULT_CFG")
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ModelSourceError(f"{path}: no safetensors weights", fix="re-export the EAGLE-3 head")
        state = {}
        for file in files:
            state.update(load_file(str(file)))
        head = _build_head(config, state)
        layer_ids = list(eagle["eagle_aux_hidden_state_layer_ids"])
        return cls(head, target.get_input_embeddings(), layer_ids)

    def session(self, prompt_ids, params, generator, *, confidence_threshold=0.0, tree=None, kv=None) -> Eagle3Session:
        if kv is None:
            raise ValueError("an EAGLE-3 session needs its slice of the head's KV pool (kv=)")
        return Eagle3Session(self, kv, params, generator, confidence_threshold, tree)

    def propose_batch(self, sessions, tokens, max_lens):
        # 1. Catch up every session on its newly verified positions: one head forward.
        import torch

        aux = [s.take_pending(len(seq)) for s, seq in zip(sessions, tokens, strict=True)]
        hidden = self.head.fc(torch.cat(aux)).split([rows.shape[0] for rows in aux])
        feeds = [HeadFeed(s.kv, seq[s.kv.length + 1:], h, num_logits=1)
                 for s, seq, h in zip(sessions, tokens, hidden, strict=True)]
        last = [(logits[-1], h[-1]) for logits, h in self.forward(feeds)]
        for session in sessions:
            session.committed = session.kv.length
        drafts: list[Draft | None] = [None] * len(sessions)
        try:
            dynamic = [i for i, s in enumerate(sessions) if isinstance(s.tree, TreeShape)]
            if dynamic:
                for i, draft in zip(dynamic, propose_dynamic_trees(
                        self, [sessions[i] for i in dynamic], [tokens[i] for i in dynamic],
                        [last[i] for i in dynamic], [max_lens[i] for i in dynamic]), strict=True):
                    drafts[i] = draft
            trees = [i for i, s in enumerate(sessions)
                     if isinstance(s.tree, Tree) and s.params.greedy]
            chains = [i for i in range(len(sessions)) if i not in trees and i not in dynamic]
            if trees:
                for i, draft in zip(trees, propose_trees(self, [sessions[i] for i in trees],
                                                         [tokens[i] for i in trees], [last[i] for i in trees]),
                                    strict=True):
                    drafts[i] = draft
            if chains:
                for i, draft in zip(chains, self._propose_chains([sessions[i] for i in chains],
                                                                 [max_lens[i] for i in chains],
                                                                 [last[i] for i in chains]), strict=True):
                    drafts[i] = draft
        finally:
            for session in sessions:  # 3. drafted positions leave the head's cache
                session.kv.length = session.committed
        return drafts

    def _propose_chains(self, sessions, max_lens, last):
        """2. Chains: each draft position is one head forward over the sessions still drafting."""
        chains = ChainDrafts(len(sessions))
        state = list(last)
        active = list(range(len(sessions)))
        for step in range(max(max_lens)):
            feeds, fed = [], []
            for i in active:
                session = sessions[i]
                logits, h = state[i]
                token = chains.take(i, session, logits, step)
                if token is None:
                    continue
                if len(chains.ids[i]) < max_lens[i]:
                    feeds.append(HeadFeed(session.kv, [token], h.unsqueeze(0), num_logits=1))
                    fed.append(i)
            active = fed
            if not feeds:
                break
            for i, (logits, h) in zip(fed, self.forward(feeds), strict=True):
                state[i] = (logits[-1], h[-1])
        return chains.drafts()

    def packed(self, feeds: list[HeadFeed], lean: bool = False):
        """A packed batch of head feeds: the attention layout over their caches, the tokens'
        embeddings and the paired hidden rows (each [1, T, hidden]) and their positions [1, T].
        `lean`: head_layout's layout, its kernel rows filled in, where the compiled attention takes the
        batch and every mask is a tree level's (else Layout.build's)."""
        import torch

        from trtspec.runtime.forward.attention import Layout

        lengths = [len(f.token_ids) for f in feeds]
        ids = torch.tensor([[t for f in feeds for t in f.token_ids]])
        embed = self.embed_tokens
        if type(embed) is torch.nn.Embedding and embed.max_norm is None:  # its forward, less the module call
            embeds = torch.nn.functional.embedding(ids, embed.weight).float()
        else:
            embeds = embed(ids).float()
        hidden = torch.cat([f.hidden for f in feeds]).unsqueeze(0)
        positions = torch.tensor([[p for f in feeds for p in (
            f.positions if f.positions is not None else range(f.kv.length, f.kv.length + len(f.token_ids)))]])
        layout = None
        if lean and hidden.dtype == torch.float32 and embeds.dtype == torch.float32:
            from trtspec.runtime.drafters.head_layout import head_layout

            attention = self.head.layers[0].self_attn
            layout = head_layout([f.kv for f in feeds], lengths, [f.mask for f in feeds],
                                 self.kv_config.num_attention_heads, attention.head_dim)
        if layout is None:
            layout = Layout.build([f.kv for f in feeds], lengths, [f.mask for f in feeds])
        return layout, embeds, hidden, positions

    def forward(self, feeds: list[HeadFeed]):
        """The EAGLE layers over a packed batch; per feed (logits of its last num_logits rows,
        pre-norm h of every row). Each feed's cache grows by its tokens."""
        from trtspec.runtime.drafters import eagle3_forward

        if self._direct is None:
            self._direct = eagle3_forward.supports(self.head)
        if not self._direct:
            return self.forward_modules(feeds)
        head = self.head
        layout, embeds, h, positions = self.packed(feeds, lean=self.lean_layout)
        h = eagle3_forward.layers(head, layout, embeds, h, positions)
        return self.outputs(feeds, h, lambda rows: eagle3_forward.readout(head, rows))

    def forward_modules(self, feeds: list[HeadFeed]):
        """`forward` through the head's transformers modules: what eagle3_forward.layers repeats
        operation for operation (its test compares the two bit for bit)."""
        import torch

        from trtspec.runtime.forward.batch import _mask_placeholder

        head = self.head
        layout, embeds, h, positions = self.packed(feeds)
        position_embeddings = head.rotary_emb(h, positions)
        for index, layer in enumerate(head.layers):
            residual = h
            if index == 0:  # HEAD_FORWARDS: where the hidden norm sits, what the residual is
                hidden = layer.hidden_norm(layer.input_layernorm(h) if head.forward_kind == "modelopt" else h)
                if head.forward_kind == "norm_before_residual":
                    residual = hidden
                normed = torch.cat([layer.input_layernorm(embeds), hidden], dim=-1)
            else:
                normed = layer.input_layernorm(h)
            attn, _ = layer.self_attn(hidden_states=normed, position_embeddings=position_embeddings,
                                      attention_mask=_mask_placeholder(), past_key_values=None, trtspec_layout=layout)
            h = residual + attn
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.outputs(feeds, h, lambda rows: head.lm_head(head.norm(rows)))

    @staticmethod
    def outputs(feeds: list[HeadFeed], h, readout):
        """Per feed (logits of its last num_logits rows, h of every row) from the packed h
        [1, T, hidden]; `readout` turns kept rows into logits. Each feed's cache grows by its tokens."""
        lengths = [len(f.token_ids) for f in feeds]
        for feed, length in zip(feeds, lengths, strict=True):
            feed.kv.length += length
        if all(feed.num_logits == length for feed, length in zip(feeds, lengths, strict=True)):
            logits = readout(h[0])  # every row kept (chain steps, tree levels): no gather
        else:
            keep, start = [], 0
            for feed, length in zip(feeds, lengths, strict=True):
                keep.extend(range(start + length - feed.num_logits, start + length))
                start += length
            logits = readout(h[0, keep])
        return list(zip(logits.split([f.num_logits for f in feeds]), h[0].split(lengths), strict=True))


class Eagle3Session(DraftSession):
    def __init__(self, drafter: Eagle3Drafter, kv, params, generator, threshold: float, tree=None):
        self.drafter = drafter
        self.head = drafter.head
        self.kv = kv                    # this sequence's slice of the head's paged cache
        self.tree = tree
        self.params = params
        self.generator = generator
        self.threshold = threshold
        self.committed = 0              # EAGLE positions of committed tokens in the cache
        self.pending: list = []         # the target's aux rows for positions not yet fed

    def on_verified(self, kept_hidden) -> None:
        # Kept as they are and projected by fc only when the head is next fed, for every session
        # at once (propose_batch): a step that drafts nothing (load policy off) costs the head
        # nothing, and a batch reads fc's weights once instead of once per sequence. A copy where
        # the rows are a view of a larger tensor (a prompt chunk's split of the step's aux rows,
        # which must not outlive the step); a decode step's kept rows are already their own.
        self.pending.append(kept_hidden if kept_hidden._base is None else kept_hidden.clone())

    def backlog(self, num_tokens: int) -> int:
        return max(0, num_tokens - 2 - self.kv.length)  # the catch-up feeds num_tokens - 1 - kv.length rows

    def take_pending(self, num_tokens: int):
        """The aux rows not yet fed, as one tensor. # -> [new positions, sum of aux hidden sizes]"""
        import torch

        hidden = torch.cat(self.pending) if len(self.pending) > 1 else self.pending[0]
        self.pending = []
        assert self.kv.length + hidden.shape[0] == num_tokens - 1, "EAGLE hidden states out of step with tokens"
        return hidden

    def propose(self, tokens: list[int], max_len: int) -> Draft | None:
        return self.drafter.propose_batch([self], [tokens], [max_len])[0]

    def to_target_vocab(self, draft_ids):
        """Draft-vocabulary ids (an int, or a tensor) in the target's vocabulary (d2t)."""
        d2t = self.head.d2t
        if d2t is None:
            return draft_ids
        if isinstance(draft_ids, int):  # a greedy choice: a list index, not three torch calls
            known, offsets = self.drafter._d2t
            if known is not d2t:
                offsets = d2t.tolist()
                self.drafter._d2t = (d2t, offsets)
            return draft_ids + offsets[draft_ids]
        return draft_ids + d2t[draft_ids]

    def choose(self, logits):
        """(token in the target vocabulary, its draft probabilities over the target vocabulary or
        None under greedy, confident) from one row of head logits. # logits: [draft_vocab]"""
        if self.params.greedy:
            choice = sampling.greedy_tokens(logits)
            confidence = float(logits.softmax(-1)[choice]) if self.threshold > 0 else 1.0
            return int(self.to_target_vocab(choice)), None, confidence >= self.threshold
        probs = sampling.logits_to_probs(logits.unsqueeze(0), self.params)[0]
        choice = sampling.sample(probs.unsqueeze(0), self.generator)[0]
        return int(self.to_target_vocab(choice)), self._in_target_vocab(probs), float(probs[choice]) >= self.threshold

    def _in_target_vocab(self, probs):
        """# probs: [draft_vocab] -> [vocab]: scatter through d2t when the draft vocab is reduced."""
        if self.head.d2t is None:
            return probs
        import torch

        full = torch.zeros(self.drafter.embed_tokens.num_embeddings)
        full[self.to_target_vocab(torch.arange(probs.shape[0]))] = probs
        return full
