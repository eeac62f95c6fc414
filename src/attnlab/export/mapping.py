"""What every Hugging Face mapping shares (:mod:`attnlab.export.hf`,
:mod:`attnlab.export.gemma`): the base class, the keys it checks, and the helpers that
rename and rearrange attnlab's tensors."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnlab.model_config import ModelConfig
from attnlab.special_tokens import BOS, EOS, PAD

# Gemma 2's logit soft-capping (attention and final): GPT-2, Llama and BERT have none
NO_SOFTCAP: dict[str, tuple[Any, ...]] = {"attn_softcap": (None,), "final_softcap": (None,)}


class Mapping:
    """One Hugging Face model class. ``needs``: the attnlab keys and the values it takes."""

    hf_class = ""
    needs: dict[str, tuple[Any, ...]] = {}
    grouped_kv = False  # whether fewer K/V heads than query heads are expressible
    scales_embeddings = False  # the class multiplies its embeddings by √d_model itself

    @classmethod
    def mismatch(cls, cfg: ModelConfig) -> str | None:
        """The first ``model.key=value`` this class cannot compute, or None."""
        for key, allowed in cls.needs.items():
            value = cfg.get(key)  # a key the model does not read: its component is absent
            if value not in allowed:
                shown = " or ".join(_shown(v) for v in allowed)
                return f"model.{key}={_shown(value)} (it needs {shown})"
        if not cls.grouped_kv and cfg.n_kv_heads not in (None, cfg.n_heads):
            return f"model.n_kv_heads={cfg.n_kv_heads} (it has one K/V head per query head)"
        return None

    def __init__(self, model: Any) -> None:
        self.model, self.cfg = model, model.cfg
        self.embedding_scale = float(model.embedding.scale)
        self.readout_multiplier = float(getattr(model.lm_head, "multiplier", 1.0))
        # the exported input and output tables differ when either is scaled or attnlab ties none
        self.tied = (
            self.cfg.tie != "none" and self.embedding_scale == 1.0
            and self.readout_multiplier == 1.0
        )  # fmt: skip

    def common_config(self) -> dict[str, Any]:
        return {
            "architectures": [self.hf_class],
            "vocab_size": self.cfg.vocab_size,
            "bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
            "tie_word_embeddings": self.tied,
            "torch_dtype": "float32",
            "use_cache": True,
        }  # fmt: skip

    def tables(self) -> tuple[Tensor, Tensor | None]:
        """(input embedding table, output projection or None when tied), scales folded in."""
        table = self.model.embedding.weight.detach()
        inputs = table * self.embedding_scale
        if self.tied:
            return inputs.clone(), None
        output = self.model.lm_head.weight.detach() * self.readout_multiplier
        return inputs.clone(), output.clone()

    def query_scale(self, attention: Any) -> float:
        return float(attention.query_scale)

    def layers(self) -> Any:
        return self.model.decoder.layers

    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    def tensors(self) -> dict[str, Tensor]:
        raise NotImplementedError


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _split_projection(attention: Any, query_scale: float) -> tuple[Tensor, ...]:
    """W_Q, W_K, W_V and their biases from the stacked projection, W_Q × the query scale."""
    weight, bias = attention.in_proj.weight.detach(), _bias(attention.in_proj)
    q, k, v = weight.split(attention.split_sizes)
    bq, bk, bv = bias.split(attention.split_sizes)
    return q * query_scale, k, v, bq * query_scale, bk, bv


def half_split_rows(n_heads: int, d_head: int) -> Tensor:
    """Row order taking interleaved rotary pairs to half-split ones, head by head."""
    within = torch.cat((torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)))
    return (torch.arange(n_heads).unsqueeze(1) * d_head + within).flatten()


def rotary_attention(prefix: str, attention: Any, d_head: int, query_scale: float,
                     bias: bool) -> dict[str, Tensor]:  # fmt: skip
    """``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` of a Llama-style attention (Llama,
    Gemma 2): attnlab's fused projection split, W_Q and W_K rows reordered from RoPE's
    interleaved pairs to Hugging Face's halves."""
    q, k, v, bq, bk, bv = _split_projection(attention, query_scale)
    q_rows = half_split_rows(attention.n_heads, d_head)
    k_rows = half_split_rows(attention.n_kv_heads, d_head)
    out = {prefix + "q_proj.weight": q[q_rows], prefix + "k_proj.weight": k[k_rows],
           prefix + "v_proj.weight": v}  # fmt: skip
    if bias:
        out |= {prefix + "q_proj.bias": bq[q_rows], prefix + "k_proj.bias": bk[k_rows],
                prefix + "v_proj.bias": bv}  # fmt: skip
    return out | _linear(prefix + "o_proj", attention.out_proj, bias)


def gated_mlp(prefix: str, ffn: Any) -> dict[str, Tensor]:
    """``gate_proj``, ``up_proj``, ``down_proj`` of a gated MLP (Llama, Gemma 2):
    attnlab's SwiGLU/GEGLU W₁ (the gate), V and W₂."""
    return {prefix + "gate_proj.weight": ffn.gate.weight.detach(),
            prefix + "up_proj.weight": ffn.linear1.weight.detach(),
            prefix + "down_proj.weight": ffn.linear2.weight.detach()}  # fmt: skip


def rotary_decoder(mapping: Any, layer_norms: Any, final_norm: Tensor) -> dict[str, Tensor]:
    """A Llama-style decoder's tensors (Llama, Gemma 2 and 3): the input table, each layer's
    rotary attention, its norms (``layer_norms(prefix, layer)``, the layout's own), its gated
    MLP, then the final norm and the output projection where it is not tied."""
    decoder, d_head = mapping.model.decoder, mapping.cfg.d_head
    embed, head = mapping.tables()
    out = {"model.embed_tokens.weight": embed}
    for i, layer in enumerate(decoder.layers):
        p = f"model.layers.{i}."
        attention = layer.self_attn
        out |= rotary_attention(p + "self_attn.", attention, d_head,
                                mapping.query_scale(attention), mapping.cfg.bias)  # fmt: skip
        out |= layer_norms(p, layer)
        out |= gated_mlp(p + "mlp.", layer.ffn)
    out["model.norm.weight"] = final_norm
    if head is not None:
        out["lm_head.weight"] = head
    return out


def _bias(module: Any) -> Tensor:
    """A linear map's or norm's bias; zeros under ``model.bias=false``, which compute the
    same as none where the target class always has one (GPT-2, BERT)."""
    if module.bias is not None:
        return module.bias.detach()
    return torch.zeros(module.weight.shape[0], dtype=module.weight.dtype)


def _norm(name: str, norm: Any) -> dict[str, Tensor]:
    return {f"{name}.weight": norm.weight.detach(), f"{name}.bias": _bias(norm)}


def _linear(name: str, linear: Any, bias: bool = True) -> dict[str, Tensor]:
    out = {f"{name}.weight": linear.weight.detach()}
    return out | {f"{name}.bias": _bias(linear)} if bias else out


def _conv1d(name: str, linear: Any) -> dict[str, Tensor]:
    """GPT-2's Conv1D: y = x W + b with W (in, out), nn.Linear's weight transposed."""
    return {f"{name}.weight": linear.weight.detach().t(), f"{name}.bias": _bias(linear)}
