"""``Gemma2ForCausalLM`` and ``Gemma3ForCausalLM`` (Gemma Team 2024, "Gemma 2"; 2025,
"Gemma 3"): the Hugging Face classes with logit soft-capping and with a sliding window or a
full one per layer, so the targets of ``model.attn_softcap``, ``model.final_softcap``,
``model.attention=sliding_window`` and ``hybrid`` in their layout.

Gemma 2's layer is attnlab's ``model.norm=sandwich`` with RMSNorm and a GeGLU feed-forward
network (``model.ffn=geglu``, GELU's tanh approximation): x + RMSNorm(Attn(RMSNorm(x))),
then x + RMSNorm(GeGLU(RMSNorm(x))), a final RMSNorm, RoPE over every feature of a head,
token embeddings × √d_model, and, when they are set, the attention logits capped before the
mask and the LM-head logits capped (§2 "logit soft-capping"). Gemma 3's adds RMSNorm on
each head's queries and keys (``model.qk_norm=true``) and a RoPE base per layer type,
``rope_theta`` for the global layers and ``rope_local_base_freq`` for the local ones
(``model.rope_theta_local``; Gemma 3 §2). What the export makes exact:

* Gemma's RMSNorm multiplies by (1 + w): each gain is written as g − 1;
* Gemma scales its embeddings by √d_model itself, so the input table is written unscaled
  (``model.scale_embeddings=true`` is required) and stays tied to the output projection;
* its attention scale is ``query_pre_attn_scalar``^−½: d_head, attnlab's 1/√d_head;
* ``layer_types``: ``sliding_attention`` (key j seen from query i when i − w < j ≤ i,
  ``sliding_window`` = ``model.window``) for a sliding_window layer, ``full_attention``
  otherwise (``model.layer_pattern`` repeated to the layers);
* RoPE's halves against attnlab's interleaved pairs: W_Q and W_K reordered as for Llama,
  and the query and key norms' gains with them.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from attnlab.components.attention import layer_kinds
from attnlab.export.mapping import Mapping, half_split_rows, rotary_decoder
from attnlab.model_config import ModelConfig
from attnlab.special_tokens import PAD

# Hugging Face's layer_types of the attnlab kinds Gemma computes
LAYER_TYPES = {"full": "full_attention", "sliding_window": "sliding_attention"}


class Gemma2Mapping(Mapping):
    """``Gemma2ForCausalLM``: sandwich RMSNorm, GeGLU, RoPE, and Gemma 2's soft-caps."""

    hf_class = "Gemma2ForCausalLM"
    needs = {
        "name": ("decoder_only",), "norm": ("sandwich",), "norm_type": ("rmsnorm",),
        "pos": ("rope",), "ffn": ("geglu",), "attention": ("full", "sliding_window", "hybrid"),
        "block": ("sequential",), "qk_norm": (False,), "prefix_lm": (False,),
        "embed_norm": (False,), "pad_id": (PAD,), "rotary_fraction": (1.0,),
        "scale_embeddings": (True,),  # Gemma multiplies its embeddings by √d_model itself
        "rope_theta_local": (None,),  # one RoPE base for every layer
        # μP scales the embeddings by √base, not √d_model, and Gemma 3 normalises the queries
        # after W_Q, which would undo μP's query scale folded into it
        "param": ("sp",),
    }  # fmt: skip
    grouped_kv = True
    scales_embeddings = True

    @classmethod
    def mismatch(cls, cfg: ModelConfig) -> str | None:
        """Its keys, then each layer's kind: a sliding window or full attention."""
        problem = super().mismatch(cfg)
        if problem is None and cfg.attention == "hybrid":
            other = [k for k in layer_kinds(cfg, cfg.n_layers) if k not in LAYER_TYPES]
            if other:
                return f"model.layer_pattern's {other[0]} (it needs full or sliding_window)"
        return problem

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.tied = self.cfg.tie != "none" and self.readout_multiplier == 1.0

    def layer_types(self) -> dict[str, Any]:
        """``layer_types`` and ``sliding_window`` (the window of the sliding layers)."""
        cfg = self.cfg
        types = [LAYER_TYPES[kind] for kind in layer_kinds(cfg, cfg.n_layers)]
        return {"layer_types": types, "sliding_window": cfg.get("window") or cfg.max_len}

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
            "query_pre_attn_scalar": cfg.d_head, **self.layer_types(),
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
        def norms(p: str, layer: Any) -> dict[str, Tensor]:
            sandwich = {"input_layernorm": layer.attn_residual.norm,
                        "post_attention_layernorm": layer.attn_residual.out_norm,
                        "pre_feedforward_layernorm": layer.ffn_residual.norm,
                        "post_feedforward_layernorm": layer.ffn_residual.out_norm}  # fmt: skip
            out = {p + f"{name}.weight": gain(norm) for name, norm in sandwich.items()}
            return out | self.head_norms(p + "self_attn.", layer.self_attn)

        return rotary_decoder(self, norms, gain(self.model.decoder.final_norm))

    def head_norms(self, prefix: str, attention: Any) -> dict[str, Tensor]:
        """The per-head query and key norms (Gemma 3's; none in Gemma 2)."""
        return {}


class Gemma3Mapping(Gemma2Mapping):
    """``Gemma3ForCausalLM``: Gemma 2's layer with RMSNorm on each head's queries and keys,
    and a RoPE base per layer type (Gemma Team 2025, "Gemma 3", §2)."""

    hf_class = "Gemma3ForCausalLM"
    needs = {**{k: v for k, v in Gemma2Mapping.needs.items() if k != "rope_theta_local"},
             "qk_norm": (True,)}  # fmt: skip

    def config(self) -> dict[str, Any]:
        cfg, config = self.cfg, super().config()
        global_theta = float(cfg.rope_theta)
        local_theta = float(cfg.get("rope_theta_local") or global_theta)
        config.update({
            "architectures": [self.hf_class], "model_type": "gemma3_text",
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": global_theta},
                "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
            },
        })  # fmt: skip
        return config

    def head_norms(self, prefix: str, attention: Any) -> dict[str, Tensor]:
        """q_norm, k_norm: their gains in the half-split order of W_Q's and W_K's rows."""
        within = half_split_rows(1, self.cfg.d_head)
        return {prefix + f"{name}.weight": gain(getattr(attention, name))[within]
                for name in ("q_norm", "k_norm")}  # fmt: skip


def gain(norm: Any) -> Tensor:
    """An RMSNorm's gain g as Gemma stores it: w with Gemma's RMSNorm computing x̂·(1 + w)."""
    return norm.weight.detach() - 1.0
