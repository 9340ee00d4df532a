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
- each further draft step feeds the drafted token with the EAGLE layer's own pre-norm output
  at the previous position; logits come from lm_head(norm(h)) (+ d2t when the draft vocab is
  smaller).

With a static tree (eagle_choices) and greedy decoding, the session fills the tree depth by depth
(one EAGLE pass per depth, tree attention mask over its own cache); under sampling it proposes
its top chain, which rejection sampling verifies losslessly.

The session keeps an EAGLE KV cache over committed positions only; drafted positions are
cropped after each proposal and recomputed from the target's real hidden states once verified.
"""

from __future__ import annotations

import json
from pathlib import Path

from trtspec.errors import ModelSourceError
from trtspec.runtime import sampling
from trtspec.runtime.drafters.base import Draft, Drafter, DraftSession

CONFIG_DROP = ("architectures", "eagle_config", "draft_vocab_size", "torch_dtype", "transformers_version")


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
    return head.eval().to(torch.float32)


class Eagle3Drafter(Drafter):
    kind = "eagle3"

    def __init__(self, head, embed_tokens, aux_layer_ids: list[int]):
        self.head = head
        self.embed_tokens = embed_tokens
        # indices into the target's hidden_states tuple (index 0 is the embedding output)
        self.aux_layer_ids = tuple(i + 1 for i in aux_layer_ids)

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

    def session(self, prompt_ids, params, generator, *, confidence_threshold=0.0, tree=None) -> Eagle3Session:
        return Eagle3Session(self, params, generator, confidence_threshold, tree)


class Eagle3Session(DraftSession):
    def __init__(self, drafter: Eagle3Drafter, params, generator, threshold: float, tree=None):
        from transformers import DynamicCache

        self.head = drafter.head
        self.embed = drafter.embed_tokens
        self.tree = tree
        self.params = params
        self.generator = generator
        self.threshold = threshold
        self.cache = DynamicCache(config=self.head.config)
        self.cached = 0                 # EAGLE positions in self.cache (all committed)
        self.pending: list = []         # fc(aux) rows for target positions not yet fed

    def on_verified(self, kept_hidden) -> None:
        self.pending.append(self.head.fc(kept_hidden))

    def _forward(self, token_ids: list[int], hidden, start: int, mask=None, positions=None):
        """Run the EAGLE layers on positions start.. (or `positions`); returns (logits, pre-norm h).

        # hidden: [n, hidden_size]; mask: [n, cache + n] bool, or None for causal
        """
        import torch

        n = len(token_ids)
        head = self.head
        embeds = self.embed(torch.tensor([token_ids])).float()
        h = hidden.unsqueeze(0)
        if positions is None:
            positions = torch.arange(start, start + n).unsqueeze(0)
        past = self.cache.get_seq_length()
        if mask is None and n > 1:  # explicit causal mask: SDPA's is_causal ignores the cache offset
            mask = torch.ones(n, past + n, dtype=torch.bool).tril(diagonal=past)
        mask4 = mask[None, None] if mask is not None else None
        position_embeddings = head.rotary_emb(h, positions)
        for index, layer in enumerate(head.layers):
            residual = h
            normed = layer.input_layernorm(h)
            if index == 0:
                normed = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(normed)], dim=-1)
            attn, _ = layer.self_attn(hidden_states=normed, position_embeddings=position_embeddings,
                                      attention_mask=mask4, past_key_values=self.cache)
            h = residual + attn
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        logits = head.lm_head(head.norm(h))[0]
        return logits, h[0]

    def _to_target_vocab(self, draft_ids):
        return draft_ids if self.head.d2t is None else draft_ids + self.head.d2t[draft_ids]

    def _catch_up(self, tokens: list[int]):
        """Feed the committed positions not yet in the EAGLE cache; return the last (logits, h)."""
        import torch

        hidden = torch.cat(self.pending) if len(self.pending) > 1 else self.pending[0]
        self.pending = []
        start = self.cached
        assert start + hidden.shape[0] == len(tokens) - 1, "EAGLE hidden states out of step with tokens"
        logits, h = self._forward(tokens[start + 1:], hidden, start)
        self.cached = len(tokens) - 1
        return logits[-1], h[-1]

    def propose(self, tokens: list[int], max_len: int) -> Draft | None:
        import torch

        from trtspec.runtime.kvcache import crop

        logits, h = self._catch_up(tokens)
        try:
            if self.tree is not None and self.params.greedy:
                return self._propose_tree(tokens, logits, h)
            ids, rows = [], []
            for step in range(max_len):
                if self.params.greedy:
                    choice = logits.argmax()
                    confidence = float(logits.softmax(-1)[choice]) if self.threshold > 0 else 1.0
                else:
                    probs = sampling.logits_to_probs(logits.unsqueeze(0), self.params)[0]
                    choice = sampling.sample(probs.unsqueeze(0), self.generator)[0]
                    confidence = float(probs[choice])
                if step > 0 and confidence < self.threshold:
                    break
                token = int(self._to_target_vocab(choice))
                ids.append(token)
                if not self.params.greedy:
                    rows.append(self._draft_probs_in_target_vocab(probs))
                if step + 1 < max_len:
                    out, hs = self._forward([token], h.unsqueeze(0), len(tokens) - 1 + step)
                    logits, h = out[-1], hs[-1]
            return Draft(torch.tensor(ids, dtype=torch.long), torch.stack(rows) if rows else None)
        finally:
            crop(self.cache, self.cached)

    def _draft_probs_in_target_vocab(self, probs):
        """# probs: [draft_vocab] -> [vocab]: scatter through d2t when the draft vocab is reduced."""
        if self.head.d2t is None:
            return probs
        import torch

        full = torch.zeros(self.embed.num_embeddings)
        full[self._to_target_vocab(torch.arange(probs.shape[0]))] = probs
        return full

    def _propose_tree(self, tokens, root_logits, root_h) -> Draft:
        """Fill the static tree depth by depth, one EAGLE pass per depth with a tree mask."""
        import torch

        tree = self.tree
        node_tokens = [0] * tree.num_nodes
        node_logits, node_h = {-1: root_logits}, {-1: root_h}
        fed: list[int] = []  # tree nodes in EAGLE cache order, after the committed positions
        base = len(tokens) - 2  # EAGLE position of the root (it predicts depth 1)
        for depth in range(1, tree.max_depth + 1):
            level = [n for n in range(tree.num_nodes) if tree.depth[n] == depth]
            for node in level:
                parent = tree.parent[node]
                top = torch.topk(node_logits[parent], tree.max_rank(parent) + 1).indices
                node_tokens[node] = int(self._to_target_vocab(top[tree.rank[node]]))
            expand = [n for n in level if tree.children[n]]
            if not expand:
                break
            past = self.cached + len(fed)
            mask = torch.zeros(len(expand), past + len(expand), dtype=torch.bool)
            mask[:, : self.cached] = True
            for row, node in enumerate(expand):
                for column, other in enumerate(fed):
                    mask[row, self.cached + column] = bool(tree.ancestors[node, other])
                mask[row, past + row] = True
            hidden = torch.stack([node_h[tree.parent[n]] for n in expand])
            positions = torch.full((1, len(expand)), base + depth)
            logits, h = self._forward([node_tokens[n] for n in expand], hidden, base + depth, mask=mask,
                                     positions=positions)
            for row, node in enumerate(expand):
                node_logits[node], node_h[node] = logits[row], h[row]
            fed.extend(expand)
        return Draft(torch.tensor(node_tokens, dtype=torch.long), tree=tree)
