"""Plain-PyTorch references of each tool's EAGLE-3 draft forward, written from their code.

Greedy drafts recomputed from scratch on a sequence (no KV cache, full causal attention each
step), from the tensors as the tool wrote them, with the tool's own layer-capture convention:

  eagle (SafeAILab/EAGLE eagle/model/cnets.py, SpecForge llama3_eagle.py LlamaDecoderLayer):
      residual = h; x = cat(input_layernorm(e), hidden_norm(h)); capture hidden_states[i]
      = the INPUT of target layer i (EAGLE's modeling_llama_kv.py appends before layer idx)
  speculators (src/speculators/models/eagle3/model_definitions.py Eagle3FirstLayerMixin):
      as eagle; with norm_before_residual the residual is hidden_norm(h); ids count inputs of layers
  modelopt: the real tool (HFEagleModel.pseudo_speculative_generate) is used in the tests instead.

Each step: logits = lm_head(norm(out[-1])), draft = argmax mapped by target = i + d2t[i]; the next
position takes the drafted token's embedding and the layer's pre-norm output of the last position.
"""

from __future__ import annotations

import torch


def rms(x, weight, eps):
    x32 = x.float()
    return weight.float() * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps))


def rotate(x, positions, theta, head_dim):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = positions.float()[:, None] * inv[None]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[None], emb.sin()[None]  # [1, T, head_dim]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def attention(x, w, prefix, config, positions):
    heads, kv_heads, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    T = x.shape[0]
    q = (x @ w[prefix + "q_proj.weight"].float().T).view(T, heads, head_dim).transpose(0, 1)
    k = (x @ w[prefix + "k_proj.weight"].float().T).view(T, kv_heads, head_dim).transpose(0, 1)
    v = (x @ w[prefix + "v_proj.weight"].float().T).view(T, kv_heads, head_dim).transpose(0, 1)
    q, k = rotate(q, positions, config["rope_theta"], head_dim), rotate(k, positions, config["rope_theta"], head_dim)
    k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
    out = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    return out.transpose(0, 1).reshape(T, heads * head_dim) @ w[prefix + "o_proj.weight"].float().T


def first_layer(e, h, w, config, positions, *, layer: str, norm_before_residual: bool):
    eps = config["rms_norm_eps"]
    hidden = rms(h, w[f"{layer}.hidden_norm.weight"], eps)
    residual = hidden if norm_before_residual else h
    x = torch.cat([rms(e, w[f"{layer}.input_layernorm.weight"], eps), hidden], dim=-1)
    h = residual + attention(x, w, f"{layer}.self_attn.", config, positions)
    m = rms(h, w[f"{layer}.post_attention_layernorm.weight"], eps)
    gate, up = m @ w[f"{layer}.mlp.gate_proj.weight"].float().T, m @ w[f"{layer}.mlp.up_proj.weight"].float().T
    return h + (torch.nn.functional.silu(gate) * up) @ w[f"{layer}.mlp.down_proj.weight"].float().T


def target_inputs_of_layers(target, ids, layer_ids_input):
    """[T, 3 * hidden]: the inputs of the target's layers `layer_ids_input` (HF hidden_states[i])."""
    with torch.no_grad():
        states = target(torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.cat([states[i][0] for i in layer_ids_input], dim=-1)


def draft(tensors, config, target, tokens, steps, *, layer: str, layer_ids_input, norm_before_residual=False):
    """Greedy draft of `steps` tokens after `tokens` (its last token pending, verified context before)."""
    embed = target.get_input_embeddings().weight
    aux = target_inputs_of_layers(target, tokens[:-1], layer_ids_input)
    with torch.no_grad():
        h_in = aux @ tensors["fc.weight"].float().T
        eagle_tokens, drafted = list(tokens[1:]), []
        for _ in range(steps):
            positions = torch.arange(len(eagle_tokens))
            e = embed[torch.tensor(eagle_tokens)].float()
            out = first_layer(e, h_in, tensors, config, positions, layer=layer,
                              norm_before_residual=norm_before_residual)
            logits = rms(out[-1], tensors["norm.weight"], config["rms_norm_eps"]) @ tensors["lm_head.weight"].float().T
            choice = int(logits.argmax())
            token = choice + int(tensors["d2t"][choice]) if "d2t" in tensors else choice
            drafted.append(token)
            eagle_tokens.append(token)
            h_in = torch.cat([h_in, out[-1:]])
    return drafted
