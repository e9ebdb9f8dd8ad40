"""A lean forward for Llama / Qwen2 models over a preallocated static KV cache (docs/design.md §8).

Eager transformers spends most of a small decoding step in Python and module dispatch, and its caches crop
every row of a batch by the same amount. Speculative decoding wants the opposite: B sequences in lockstep
that each accept a different number of drafts. So, the way gpt-fast does it, we run the transformers
weights through a forward of our own. With ``fused`` (the default) q/k/v and gate/up are concatenated once and
the transformers modules' parameters are then pointed at views of the fused tensors, so there is still one
copy of every weight and the transformers model keeps working (tested: same logits, shared storage):

* the KV cache is preallocated, ``[B, kv_heads, max_len, head_dim]`` per layer; a forward writes the new keys
  and values of row b at positions ``start[b] .. start[b] + T - 1`` and attends to cache positions
  ``<= `` its own position, so rolling a row back is only a smaller ``start`` next time (stale slots beyond
  it are overwritten before anything can attend to them);
* RoPE uses the inverse frequencies and attention scaling the transformers model computed from its config
  (rope_theta and static rope scaling included); RMSNorm, SiLU MLP, GQA and tied embeddings as in
  transformers, so greedy outputs match ``generate`` and logits match to float tolerance (tested);
* ``hidden_layer`` returns the hidden state with transformers' ``hidden_states`` indexing (0 = embeddings,
  i = after layer i, -1 / L = the final, normed state) for judges.

Other architectures (and position-dependent RoPE variants or sliding windows) are refused by
:func:`fast_unsupported`; callers fall back to the eager transformers path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

SUPPORTED_TYPES = ("llama", "qwen2")
_STATIC_ROPE = ("default", "linear", "llama3", "yarn", "ntk")  # inv_freq does not depend on the position


def fast_unsupported(model) -> str | None:
    """Why ``model`` cannot run on the fast path (None if it can)."""
    cfg = getattr(model, "config", None)
    if cfg is None:
        return "no model config"
    if getattr(cfg, "model_type", None) not in SUPPORTED_TYPES:
        return f"architecture {getattr(cfg, 'model_type', None)!r} (fast path: {', '.join(SUPPORTED_TYPES)})"
    if getattr(cfg, "quantization_config", None) is not None:
        return "quantised weights (transformers backend)"
    if len(set((getattr(model, "hf_device_map", None) or {}).values())) > 1:
        return "weights sharded over several devices (transformers backend)"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r}"
    if getattr(cfg, "mlp_bias", False):
        return "MLP biases"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ())):
        return "sliding-window layers"
    rope = getattr(model.model, "rotary_emb", None)
    if rope is None or getattr(rope, "rope_type", "default") not in _STATIC_ROPE:
        return f"rope type {getattr(rope, 'rope_type', None)!r}"
    return None


def _fuse(params: list) -> Tensor:
    """One tensor holding ``params`` stacked along dim 0; each parameter's data becomes a view of it.

    Why not keep both: a fused copy next to the originals is ~65 % of every layer held twice. Rebinding
    ``.data`` keeps the Parameter objects (and the transformers model, optimizers, hooks) intact; an in-place
    update through a parameter writes into the fused tensor and bumps the shared version counter, which
    :func:`judgekit.decode.backends.fast_lm` reads to notice it. Always a fresh tensor (a rebuild re-fuses
    and the previous fused tensor is freed with the views that pointed into it)."""
    with torch.inference_mode(False), torch.no_grad():
        fused = torch.cat([p.data for p in params])
        offset = 0
        for p in params:
            n = p.shape[0]
            p.data = fused[offset: offset + n]
            offset += n
    return fused


def extra_bytes(model, tensors: list[Tensor]) -> int:
    """Bytes of ``tensors`` whose storage is not one of ``model``'s parameters' or buffers' storages: what a
    fast forward holds beyond the model (counting each storage once)."""
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    seen, total = set(), 0
    for t in tensors:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in own and ptr not in seen:
            seen.add(ptr)
            total += t.untyped_storage().nbytes()
    return total


@dataclass
class _Layer:
    wqkv: Tensor | None  # fused [q; k; v] rows (None: separate)
    bqkv: Tensor | None
    wq: Tensor
    wk: Tensor
    wv: Tensor
    bq: Tensor | None
    bk: Tensor | None
    bv: Tensor | None
    wo: Tensor
    bo: Tensor | None
    w_gate_up: Tensor | None
    w_gate: Tensor
    w_up: Tensor
    w_down: Tensor
    ln_attn: Tensor
    ln_mlp: Tensor


class StaticCache:
    """Preallocated keys/values, one [B, kv_heads, max_len, head_dim] pair per layer."""

    def __init__(self, n_layers: int, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device):
        shape = (batch, kv_heads, max_len, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.max_len = max_len

    def row_view(self, row: int) -> "StaticCache":
        """A one-row cache sharing this one's storage (writes land in the batch cache)."""
        view = StaticCache.__new__(StaticCache)
        view.keys = [k[row: row + 1] for k in self.keys]
        view.values = [v[row: row + 1] for v in self.values]
        view.max_len = self.max_len
        return view

    def select(self, rows: Tensor) -> None:
        """Keep only these batch rows (finished sequences leave the batch)."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]


class FastLM:
    """The forward of a Llama / Qwen2 causal LM on a :class:`StaticCache` with per-row positions."""

    def __init__(self, model, fused: bool = True, compile: bool = False):
        reason = fast_unsupported(model)
        if reason is not None:
            raise ValueError(f"no fast path for this model: {reason}")
        cfg = model.config
        self.config = cfg
        self.n_heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.eps = cfg.rms_norm_eps
        self.embed = model.get_input_embeddings().weight
        self.lm_head = model.get_output_embeddings().weight
        self.lm_head_bias = model.get_output_embeddings().bias
        self.norm = model.model.norm.weight
        self.dtype, self.device = self.embed.dtype, self.embed.device
        rope = model.model.rotary_emb
        self._inv_freq = rope.inv_freq.detach().float().to(self.device)
        self._rope_scale = float(rope.attention_scaling)
        self._cos = self._sin = None
        self.layers = [self._layer(block, fused) for block in model.model.layers]
        self._impl = torch.compile(self._forward, dynamic=True) if compile else self._forward

    @staticmethod
    def _layer(block, fused: bool) -> _Layer:
        att, mlp = block.self_attn, block.mlp
        if mlp.gate_proj.bias is not None or mlp.up_proj.bias is not None or mlp.down_proj.bias is not None:
            raise ValueError("no fast path for MLP biases")
        qkv = (att.q_proj, att.k_proj, att.v_proj)
        biases = [lin.bias is not None for lin in qkv]
        wqkv = bqkv = w_gate_up = None
        if fused:
            wqkv = _fuse([lin.weight for lin in qkv])
            if all(biases):
                bqkv = _fuse([lin.bias for lin in qkv])
            elif any(biases):  # partial biases: the projections stay separate (and unfused)
                wqkv = None
            w_gate_up = _fuse([mlp.gate_proj.weight, mlp.up_proj.weight])
        bias = lambda lin: None if lin.bias is None else lin.bias.detach()  # noqa: E731
        return _Layer(wqkv, bqkv, *(lin.weight.detach() for lin in qkv), *(bias(lin) for lin in qkv),
                      att.o_proj.weight.detach(), bias(att.o_proj), w_gate_up, mlp.gate_proj.weight.detach(),
                      mlp.up_proj.weight.detach(), mlp.down_proj.weight.detach(),
                      block.input_layernorm.weight.detach(), block.post_attention_layernorm.weight.detach())

    def tensors(self) -> list[Tensor]:
        """Every tensor this forward reads besides the KV caches (for :func:`extra_bytes`)."""
        out = [self.embed, self.lm_head, self.norm, self._inv_freq]
        if self.lm_head_bias is not None:
            out.append(self.lm_head_bias)
        if self._cos is not None:
            out += [self._cos, self._sin, self._sin_signed]
        for L in self.layers:
            out += [t for t in vars(L).values() if t is not None]
        return out

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def new_cache(self, batch: int, max_len: int) -> StaticCache:
        self._rope_table(max_len)
        return StaticCache(self.n_layers, batch, self.kv_heads, max_len, self.head_dim, self.dtype, self.device)

    def _rope_table(self, max_len: int) -> None:
        # The same float32 arithmetic as transformers' rotary embedding, tabulated once per length.
        if self._cos is not None and self._cos.shape[0] >= max_len:
            return
        freqs = torch.arange(max_len, device=self.device, dtype=torch.float32)[:, None] * self._inv_freq[None]
        emb = torch.cat([freqs, freqs], -1)
        self._cos = (emb.cos() * self._rope_scale).to(self.dtype)
        self._sin = (emb.sin() * self._rope_scale).to(self.dtype)
        # rotate_half(x) * sin == roll(x, D/2) * [-sin_1, sin_2]: one roll instead of chunk, neg and cat
        half = self._sin.shape[-1] // 2
        self._sin_signed = torch.cat([-self._sin[:, :half], self._sin[:, half:]], -1)

    def _rms(self, x: Tensor, w: Tensor) -> Tensor:
        if x.dtype == torch.float32:  # one fused kernel; the same arithmetic as transformers' in float32
            return torch.rms_norm(x, w.shape, w, self.eps)  # not F.rms_norm: its Python wrapper, per call
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * xf.to(x.dtype)

    def forward(self, ids: Tensor, start: Tensor | int, cache: StaticCache, kv_len: int, *,
                logit_cols: Tensor | None = None, hidden_layer: int | tuple[int, ...] | None = None,
                cache_rows: Tensor | None = None, tree: tuple[Tensor, Tensor, Tensor] | None = None
                ) -> tuple[Tensor, Tensor | tuple[Tensor, ...] | None]:
        """Feed ``ids`` [B, T] to row b at positions start[b] + 0..T-1; return logits [B, C, V] at the columns
        ``logit_cols`` (all T if None) and, if asked, the hidden state [B, T, H] of ``hidden_layer`` (a tuple of
        layers gives a tuple of states).

        ``start`` is a [B] tensor, or a host int when every row starts at the same position (then the
        cache is written by slicing and, for one new token, attention needs no mask). ``kv_len`` (a host
        int >= max(start) + T) bounds the cache slots attention reads. ``cache_rows`` [B] (with a tensor
        ``start``) runs the batch on those rows of a larger cache (the miner feeds a subset of its problems).
        ``tree`` (with a tensor ``start``) = (slots [T], positions [T], mask [T, W]), offsets from start: column
        c is written to slot start + slots[c] at RoPE position start + positions[c] and sees the slots before
        start plus the slots start + j with mask[c, j] (a draft tree, :mod:`judgekit.decode.treedecode`).
        """
        layers = hidden_layer if isinstance(hidden_layer, tuple) else (hidden_layer,)
        layers = tuple(None if h is None else h + self.n_layers + 1 if h < 0 else h for h in layers)
        logits, states = self._impl(ids, start, cache.keys, cache.values, kv_len, logit_cols, layers, cache_rows,
                                   tree)
        if isinstance(hidden_layer, tuple):
            return logits, states
        return logits, states[0]

    def _forward(self, ids, start, keys, values, kv_len: int, logit_cols, layers: tuple, cache_rows=None,
                 tree=None):
        B, T = ids.shape
        uniform = isinstance(start, int)
        if uniform:
            cos, sin = self._cos[start: start + T, None], self._sin_signed[start: start + T, None]  # [T, 1, D]
            if T == 1 and kv_len == start + 1:
                mask = None
            else:
                pos = start + torch.arange(T, device=ids.device)
                mask = torch.arange(kv_len, device=ids.device)[None, :] <= pos[:, None]
        elif tree is not None:  # tree columns: write slots, RoPE positions and visibility are given apart
            slot_off, pos_off, tmask = tree
            pos = start[:, None] + slot_off[None]  # [B, T] the slots written
            rope = start[:, None] + pos_off[None]
            cos, sin = self._cos[rope].unsqueeze(2), self._sin_signed[rope].unsqueeze(2)
            rel = torch.arange(kv_len, device=ids.device)[None, None, :] - start[:, None, None]  # [B, 1, kv]
            W = tmask.shape[1]
            seen = tmask.expand(B, T, W).gather(2, rel.clamp(0, W - 1).expand(B, T, kv_len))
            mask = ((rel < 0) | ((rel < W) & seen)).unsqueeze(1)
            rows = (torch.arange(B, device=ids.device) if cache_rows is None else cache_rows)[:, None]
        else:
            pos = start[:, None] + torch.arange(T, device=ids.device)  # [B, T]
            cos, sin = self._cos[pos].unsqueeze(2), self._sin_signed[pos].unsqueeze(2)  # [B, T, 1, D]
            mask = (torch.arange(kv_len, device=ids.device)[None, None, :] <= pos[:, :, None]).unsqueeze(1)
            rows = (torch.arange(B, device=ids.device) if cache_rows is None else cache_rows)[:, None]
        if mask is not None:  # additive, once: SDPA would turn a boolean mask into this in every layer
            mask = torch.where(mask, 0.0, float("-inf")).to(self.dtype)
        x = F.embedding(ids, self.embed)
        states: dict[int, Tensor] = {0: x} if 0 in layers else {}
        nh, kvh, hd = self.n_heads, self.kv_heads, self.head_dim
        for i, L in enumerate(self.layers):
            h = self._rms(x, L.ln_attn)
            if L.wqkv is not None:  # RoPE on q and k together: [B, T, nh + kvh, D]
                qkv = F.linear(h, L.wqkv, L.bqkv).view(B, T, nh + 2 * kvh, hd)
                qk, v = qkv[:, :, : nh + kvh], qkv[:, :, nh + kvh:]
                qk = qk * cos + qk.roll(hd // 2, -1) * sin
                q, k = qk[:, :, :nh], qk[:, :, nh:]
            else:
                q = F.linear(h, L.wq, L.bq).view(B, T, nh, hd)
                k = F.linear(h, L.wk, L.bk).view(B, T, kvh, hd)
                v = F.linear(h, L.wv, L.bv).view(B, T, kvh, hd)
                q = q * cos + q.roll(hd // 2, -1) * sin
                k = k * cos + k.roll(hd // 2, -1) * sin
            q = q.transpose(1, 2)  # [B, nh, T, D]
            if uniform:
                keys[i][:, :, start: start + T] = k.transpose(1, 2)
                values[i][:, :, start: start + T] = v.transpose(1, 2)
            else:
                keys[i][rows, :, pos] = k
                values[i][rows, :, pos] = v
            if cache_rows is None:
                kk, vv = keys[i][:, :, :kv_len], values[i][:, :, :kv_len]
            else:  # a gathered copy of this batch's rows (index_select: 2-3x faster than an advanced index here)
                kk = keys[i][:, :, :kv_len].index_select(0, cache_rows)
                vv = values[i][:, :, :kv_len].index_select(0, cache_rows)
            a = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, scale=hd ** -0.5,
                                               enable_gqa=kvh != nh)
            x = x + F.linear(a.transpose(1, 2).reshape(B, T, nh * hd), L.wo, L.bo)
            h = self._rms(x, L.ln_mlp)
            if L.w_gate_up is not None:
                gate, up = F.linear(h, L.w_gate_up).chunk(2, -1)
            else:
                gate, up = F.linear(h, L.w_gate), F.linear(h, L.w_up)
            x = x + F.linear(F.silu(gate) * up, L.w_down)
            if i + 1 in layers and i + 1 < self.n_layers:
                states[i + 1] = x
        x = self._rms(x, self.norm)
        if self.n_layers in layers:
            states[self.n_layers] = x
        if logit_cols is not None:
            x = x[:, logit_cols] if logit_cols.dim() == 1 else x[torch.arange(B, device=x.device)[:, None], logit_cols]
        return F.linear(x, self.lm_head, self.lm_head_bias), tuple(states.get(h) for h in layers)

