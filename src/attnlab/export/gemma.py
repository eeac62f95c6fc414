"""``Gemma2ForCausalLM`` (Gemma Team 2024, "Gemma 2"): the one Hugging Face class with logit
soft-capping, so the only target of ``model.attn_softcap`` and ``model.final_softcap``.

Gemma 2's layer is attnlab's ``model.norm=sandwich`` with RMSNorm and a GeGLU feed-forward
network (``model.ffn=geglu``, GELU's tanh approximation): x + RMSNorm(Attn(RMSNorm(x))),
then x + RMSNorm(GeGLU(RMSNorm(x))), a final RMSNorm, RoPE over every feature of a head,
token embeddings × √d_model, and, when they are set, the attention logits capped before the
mask and the LM-head logits capped (§2 "logit soft-capping"). What the export makes exact:

* Gemma's RMSNorm multiplies by (1 + w): each gain is written as g − 1;
* Gemma scales its embeddings by √d_model itself, so the input table is written unscaled
  (``model.scale_embeddings=true`` is required) and stays tied to the output projection;
* its attention scale is ``query_pre_attn_scalar``^−½: d_head, attnlab's 1/√d_head;
* every layer is global (``layer_types`` all ``full_attention``): attnlab's
  ``model.attention=full`` has no alternating sliding window;
* RoPE's halves against attnlab's interleaved pairs: W_Q and W_K reordered as for Llama.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from attnlab.export.mapping import Mapping, gated_mlp, rotary_attention
from attnlab.special_tokens import PAD


class Gemma2Mapping(Mapping):
    """``Gemma2ForCausalLM``: sandwich RMSNorm, GeGLU, RoPE, and Gemma 2's soft-caps."""

    hf_class = "Gemma2ForCausalLM"
    needs = {
        "name": ("decoder_only",), "norm": ("sandwich",), "norm_type": ("rmsnorm",),
        "pos": ("rope",), "ffn": ("geglu",), "attention": ("full",),
        "block": ("sequential",), "qk_norm": (False,), "prefix_lm": (False,),
        "embed_norm": (False,), "pad_id": (PAD,), "rotary_fraction": (1.0,),
        "scale_embeddings": (True,),  # Gemma multiplies its embeddings by √d_model itself
    }  # fmt: skip
    grouped_kv = True
    scales_embeddings = True

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.tied = self.cfg.tie != "none" and self.readout_multiplier == 1.0

    def config(self) -> dict[str, Any]:
        cfg = self.cfg
        return {
            **self.common_config(),
            "model_type": "gemma2",
            "hidden_size": cfg.d_model, "intermediate_size": cfg.ff_dim,
            "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads, "head_dim": cfg.d_head,
            "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": cfg.max_len,
            "rms_norm_eps": 1e-5,  # attnlab's RMSNorm
            "rope_parameters": {"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
            "attention_bias": cfg.bias, "attention_dropout": cfg.attn_dropout,
            "query_pre_attn_scalar": cfg.d_head,
            "sliding_window": cfg.max_len, "layer_types": ["full_attention"] * cfg.n_layers,
            "attn_logit_softcapping": cfg.get("attn_softcap"),
            "final_logit_softcapping": cfg.get("final_softcap"),
        }  # fmt: skip

    def tables(self) -> tuple[Tensor, Tensor | None]:
        """(input table, output projection or None when tied), the input table unscaled."""
        table = self.model.embedding.weight.detach().clone()
        if self.tied:
            return table, None
        return table, (self.model.lm_head.weight.detach() * self.readout_multiplier).clone()

    def tensors(self) -> dict[str, Tensor]:
        decoder, d_head = self.model.decoder, self.cfg.d_head
        embed, head = self.tables()
        out = {"model.embed_tokens.weight": embed}
        for i, layer in enumerate(decoder.layers):
            p = f"model.layers.{i}."
            attention = layer.self_attn
            out |= rotary_attention(p + "self_attn.", attention, d_head,
                                    self.query_scale(attention), self.cfg.bias)  # fmt: skip
            norms = {"input_layernorm": layer.attn_residual.norm,
                     "post_attention_layernorm": layer.attn_residual.out_norm,
                     "pre_feedforward_layernorm": layer.ffn_residual.norm,
                     "post_feedforward_layernorm": layer.ffn_residual.out_norm}  # fmt: skip
            out |= {p + f"{name}.weight": gain(norm) for name, norm in norms.items()}
            out |= gated_mlp(p + "mlp.", layer.ffn)
        out["model.norm.weight"] = gain(decoder.final_norm)
        if head is not None:
            out["lm_head.weight"] = head
        return out


def gain(norm: Any) -> Tensor:
    """An RMSNorm's gain g as Gemma stores it: w with Gemma's RMSNorm computing x̂·(1 + w)."""
    return norm.weight.detach() - 1.0
