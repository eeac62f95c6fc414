"""``Qwen3_5ForCausalLM`` (Qwen Team 2026, Qwen3.5's text model): the Hugging Face class
whose linear-attention layers are Gated DeltaNet (Yang et al. 2025), so the target of
``model.attention=gated_deltanet``.

Its layer is attnlab's Pre-LN layer with RMSNorm and a SwiGLU feed-forward network:
x + GatedDeltaNet(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)), a final RMSNorm. Its
``Qwen3_5GatedDeltaNet`` computes attnlab's mixer (:mod:`attnlab.nn.gated_deltanet`): the
short conv and SiLU over (q, k, v), q and k L2-normalised (x/√(‖x‖² + 10⁻⁶)), q scaled by
1/√d_k, β = σ(·), log α = −exp(A_log)·softplus(· + dt_bias), RMSNorm(o)·SiLU(z) per head. What
the export makes exact:

* every layer is linear attention (``layer_types`` all ``linear_attention``): attnlab's
  model has no interleaved softmax layers;
* one key head per value head (``linear_num_key_heads`` = ``linear_num_value_heads`` =
  ``model.n_heads``), d_k = d_model/n_heads, d_v = ``ssm_expand``·d_k;
* attnlab's fused input projection splits into ``in_proj_qkv``, ``in_proj_z`` (the output
  gate), ``in_proj_a`` and ``in_proj_b``; Qwen's projections have no biases
  (``model.bias=false`` is required);
* Qwen's layer norms multiply by (1 + w): each gain is written as g − 1 (its gated norm
  multiplies by w: written as is); one ``rms_norm_eps``, 10⁻⁵, attnlab's;
* ``use_cache`` false: the class builds a softmax-attention mask from its cache, which
  fails when no layer is a softmax one, so generation recomputes the prefix each step
  (the logits are the same).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from attnlab.export.gemma import gain
from attnlab.export.mapping import NO_SOFTCAP, Mapping, gated_mlp
from attnlab.special_tokens import PAD


class Qwen35Mapping(Mapping):
    """``Qwen3_5ForCausalLM``: Pre-LN RMSNorm, Gated DeltaNet mixers, SwiGLU, no biases."""

    hf_class = "Qwen3_5ForCausalLM"
    needs = {
        "name": ("decoder_only",), "norm": ("pre",), "norm_type": ("rmsnorm",),
        "pos": ("none",), "ffn": ("swiglu",), "attention": ("gated_deltanet",),
        "block": ("sequential",), "prefix_lm": (False,), "embed_norm": (False,),
        "pad_id": (PAD,), "bias": (False,), **NO_SOFTCAP,
    }  # fmt: skip

    def config(self) -> dict[str, Any]:
        cfg = self.cfg
        d_k = cfg.d_model // cfg.n_heads
        return {
            **self.common_config(),
            "model_type": "qwen3_5_text",
            "hidden_size": cfg.d_model, "intermediate_size": cfg.ff_dim,
            "num_hidden_layers": cfg.n_layers, "hidden_act": "silu",
            "max_position_embeddings": cfg.max_len, "rms_norm_eps": 1e-5,  # attnlab's RMSNorm
            "layer_types": ["linear_attention"] * cfg.n_layers,
            "linear_conv_kernel_dim": cfg.ssm_conv,
            "linear_num_key_heads": cfg.n_heads, "linear_num_value_heads": cfg.n_heads,
            "linear_key_head_dim": d_k, "linear_value_head_dim": cfg.ssm_expand * d_k,
            # the softmax layers' sizes, which no layer uses
            "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_heads,
            "head_dim": d_k, "attention_bias": False,
            "use_cache": False,  # its cache of linear-attention layers only cannot decode
        }  # fmt: skip

    def query_scale(self, attention: Any) -> float:
        return 1.0  # q is L2-normalised, then scaled by 1/√d_k in both

    def tensors(self) -> dict[str, Tensor]:
        decoder = self.model.decoder
        embed, head = self.tables()
        out = {"model.embed_tokens.weight": embed}
        for i, layer in enumerate(decoder.layers):
            p = f"model.layers.{i}."
            out |= gated_deltanet(p + "linear_attn.", layer.self_attn)
            out[p + "input_layernorm.weight"] = gain(layer.attn_residual.norm)
            out[p + "post_attention_layernorm.weight"] = gain(layer.ffn_residual.norm)
            out |= gated_mlp(p + "mlp.", layer.ffn)
        out["model.norm.weight"] = gain(decoder.final_norm)
        if head is not None:
            out["lm_head.weight"] = head
        return out


def gated_deltanet(prefix: str, mixer: Any) -> dict[str, Tensor]:
    """``Qwen3_5GatedDeltaNet``'s tensors from attnlab's mixer: the fused input projection
    ((q, k, v), the gate z, α's and β's logits) split, the rest as they are."""
    qkv, z, a, b = mixer.in_proj.weight.detach().split(mixer.split_sizes)
    return {
        prefix + "in_proj_qkv.weight": qkv, prefix + "in_proj_z.weight": z,
        prefix + "in_proj_a.weight": a, prefix + "in_proj_b.weight": b,
        prefix + "conv1d.weight": mixer.conv1d.weight.detach(),
        prefix + "dt_bias": mixer.dt_bias.detach(), prefix + "A_log": mixer.A_log.detach(),
        prefix + "norm.weight": mixer.norm.weight.detach(),
        prefix + "out_proj.weight": mixer.out_proj.weight.detach(),
    }  # fmt: skip
