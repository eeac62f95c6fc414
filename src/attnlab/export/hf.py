"""attnlab models as Hugging Face ``transformers`` checkpoints: one mapping per model class.

A mapping says which attnlab configurations it reproduces exactly and renames (and, where
the layouts differ, rearranges) the weights; nothing here imports ``transformers``, so an
export needs only ``safetensors``. The tests load every mapping with ``from_pretrained``
and compare logits and greedy generation.

* :class:`GPT2Mapping`  ``decoder_only`` with Pre-LN LayerNorm, learned positions and a
  ReLU, GELU or squared-ReLU FFN → ``GPT2LMHeadModel`` (Radford et al. 2019), its
  ``activation_function`` (``relu2``: transformers' ``ReLUSquaredActivation``, Primer's).
* :class:`LlamaMapping` ``decoder_only`` with Pre-LN RMSNorm, RoPE and SwiGLU or GEGLU (and
  GQA) → ``LlamaForCausalLM`` (Touvron et al. 2023), whose MLP is act(x·gate)·(x·up) with
  ``hidden_act`` as the gate: ``silu`` or ``gelu_pytorch_tanh``, the tanh GELU of attnlab's
  GEGLU. (Gemma's GEGLU model also scales the embeddings by √d_model and norms by (1 + g);
  Llama's class computes attnlab's Pre-LN model with nothing folded.)
* :class:`~attnlab.export.gemma.Gemma2Mapping` ``decoder_only`` with sandwich RMSNorm, RoPE
  and GEGLU → ``Gemma2ForCausalLM`` (Gemma Team 2024), the one class with logit soft-capping
  (``model.attn_softcap``, ``model.final_softcap``), so the only target of either; a
  sliding window per layer (``model.attention=sliding_window``, or ``hybrid`` whose
  ``model.layer_pattern`` has sliding_window and full layers: ``layer_types``).
* :class:`~attnlab.export.gemma.Gemma3Mapping` the same with ``model.qk_norm=true`` →
  ``Gemma3ForCausalLM`` (Gemma Team 2025), and the one target of ``model.rope_theta_local``
  (``rope_parameters`` per layer type: 1M global, 10k local in Gemma 3).
* :class:`~attnlab.export.qwen.Qwen35Mapping` ``decoder_only`` with Pre-LN RMSNorm,
  ``model.attention=gated_deltanet`` and SwiGLU, no biases → ``Qwen3_5ForCausalLM``, every
  layer a Gated DeltaNet one.
* :class:`BertMapping`  ``encoder_only`` with Post-LN LayerNorm, learned positions and the
  embedding norm (``model.embed_norm=true``) → ``BertModel`` (Devlin et al. 2019), the
  encoder's states; attnlab's heads (a bare projection for the masked LM, a mean pool for
  classification) are not BERT's (a transform before the MLM projection, a tanh pooler on
  [CLS]) and are left out.

Every key that changes what an attnlab model computes is in a mapping's ``needs`` (or
folded in, below); in particular ``model.embed_norm`` (GPT-2 and Llama have no norm over
the embeddings, BERT always has one) and ``model.pad_id`` (attnlab's attention hides the
keys of that id; the exported ``pad_token_id`` is attnlab's ``<pad>``, 0).

What a mapping folds in exactly, so the exported model computes the same function:

* the token embedding's √d_model scale (§3.4 of Vaswani et al.) multiplies the input
  table; the output projection then needs its own unscaled copy (``tie_word_embeddings``
  false);
* μP's multipliers (:mod:`attnlab.models.parametrization`): the query scale into W_Q and
  its bias, the readout's α_output·base/width into the output projection (untied as above).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnlab.errors import ConfigError
from attnlab.export.gemma import Gemma2Mapping, Gemma3Mapping
from attnlab.export.mapping import (
    NO_SOFTCAP,
    Mapping,
    _conv1d,
    _linear,
    _norm,
    _shown,
    _split_projection,
    rotary_decoder,
)
from attnlab.export.qwen import Qwen35Mapping
from attnlab.model_config import ModelConfig
from attnlab.special_tokens import PAD

# transformers' ACT2FN names: the activation of an ungated FFN, the gate of a gated one
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "relu2": "relu2"}
GATES = {"swiglu": "silu", "geglu": "gelu_pytorch_tanh"}


class GPT2Mapping(Mapping):
    """``GPT2LMHeadModel``: x + Attn(LN(x)); x + MLP(LN(x)); final LN (Radford et al. 2019, §2.3).

    GPT-2's ``Conv1D`` stores its weight as (in, out), the transpose of ``nn.Linear``'s, and
    ``c_attn`` holds [W_Q | W_K | W_V] side by side: attnlab's stacked rows, transposed."""

    hf_class = "GPT2LMHeadModel"
    needs = {
        "name": ("decoder_only",), "norm": ("pre",), "norm_type": ("layernorm",),
        "pos": ("learned",), "ffn": tuple(ACTIVATIONS), "attention": ("full",),
        "block": ("sequential",), "qk_norm": (False,), "prefix_lm": (False,),
        "embed_norm": (False,), "pad_id": (PAD,), **NO_SOFTCAP,
    }  # fmt: skip

    def config(self) -> dict[str, Any]:
        cfg = self.cfg
        return {
            **self.common_config(),
            "model_type": "gpt2",
            "n_embd": cfg.d_model, "n_layer": cfg.n_layers, "n_head": cfg.n_heads,
            "n_inner": cfg.ff_dim, "n_positions": cfg.max_len,
            "activation_function": ACTIVATIONS[cfg.ffn],
            "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.attn_dropout,
            "layer_norm_epsilon": 1e-5,  # nn.LayerNorm's default, attnlab's norms
            "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False,
        }  # fmt: skip

    def tensors(self) -> dict[str, Tensor]:
        decoder = self.model.decoder
        wte, head = self.tables()
        out = {"transformer.wte.weight": wte,
               "transformer.wpe.weight": decoder.positions.table.weight.detach()}  # fmt: skip
        for i, layer in enumerate(decoder.layers):
            p = f"transformer.h.{i}."
            attention = layer.self_attn
            q, k, v, bq, bk, bv = _split_projection(attention, self.query_scale(attention))
            out |= _norm(p + "ln_1", layer.attn_residual.norm)
            out[p + "attn.c_attn.weight"] = torch.cat((q, k, v)).t()
            out[p + "attn.c_attn.bias"] = torch.cat((bq, bk, bv))
            out |= _conv1d(p + "attn.c_proj", layer.self_attn.out_proj)
            out |= _norm(p + "ln_2", layer.ffn_residual.norm)
            out |= _conv1d(p + "mlp.c_fc", layer.ffn.linear1)
            out |= _conv1d(p + "mlp.c_proj", layer.ffn.linear2)
        out |= _norm("transformer.ln_f", decoder.final_norm)
        if head is not None:
            out["lm_head.weight"] = head
        return out


class LlamaMapping(Mapping):
    """``LlamaForCausalLM``: x + Attn(RMSNorm(x)) with RoPE; x + SwiGLU(RMSNorm(x)) (GEGLU).

    attnlab rotates interleaved pairs (x_2i, x_2i+1) (RoFormer eq. 34); Hugging Face's Llama
    rotates the halves (x_i, x_i+d/2) with the same θ_i. Reordering every head's rows of W_Q
    and W_K (and their biases) to (0, 2, 4, …, 1, 3, 5, …) makes the two the same rotation, and
    q·k is unchanged by a permutation applied to both. attnlab's projections have biases
    unless ``model.bias=false`` (``attention_bias`` follows it); its SwiGLU has none
    (``mlp_bias`` false)."""

    hf_class = "LlamaForCausalLM"
    needs = {
        "name": ("decoder_only",), "norm": ("pre",), "norm_type": ("rmsnorm",),
        "pos": ("rope",), "ffn": tuple(GATES), "attention": ("full",),
        "block": ("sequential",), "qk_norm": (False,), "prefix_lm": (False,),
        "embed_norm": (False,), "pad_id": (PAD,), **NO_SOFTCAP,
        "rotary_fraction": (1.0,),  # rope_theta maps to config.json's own key
    }  # fmt: skip
    grouped_kv = True

    def config(self) -> dict[str, Any]:
        cfg = self.cfg
        return {
            **self.common_config(),
            "model_type": "llama",
            "hidden_size": cfg.d_model, "intermediate_size": cfg.ff_dim,
            "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads, "head_dim": cfg.d_head,
            "hidden_act": GATES[cfg.ffn], "max_position_embeddings": cfg.max_len,
            "rms_norm_eps": 1e-5,  # attnlab's RMSNorm
            "rope_theta": float(cfg.rope_theta),
            "rope_parameters": {"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
            "attention_bias": cfg.bias, "mlp_bias": False, "attention_dropout": cfg.attn_dropout,
        }  # fmt: skip

    def tensors(self) -> dict[str, Tensor]:
        def norms(p: str, layer: Any) -> dict[str, Tensor]:
            return {p + "input_layernorm.weight": layer.attn_residual.norm.weight.detach(),
                    p + "post_attention_layernorm.weight":
                        layer.ffn_residual.norm.weight.detach()}  # fmt: skip

        return rotary_decoder(self, norms, self.model.decoder.final_norm.weight.detach())


class BertMapping(Mapping):
    """``BertModel``: E = LN(token + position + segment); x ← LN(x + Attn(x)); x ← LN(x + FFN(x))
    (Devlin et al. 2019, §3; Post-LN as Vaswani et al. §3.1). attnlab has no segments: one
    segment type whose embedding is zero. Loaded with ``add_pooling_layer=False``: BERT's
    pooler has no attnlab counterpart."""

    hf_class = "BertModel"
    needs = {
        "name": ("encoder_only",), "norm": ("post",), "norm_type": ("layernorm",),
        "pos": ("learned",), "ffn": tuple(ACTIVATIONS), "attention": ("full",),
        "block": ("sequential",), "qk_norm": (False,), "embed_norm": (True,), "pad_id": (PAD,),
        **NO_SOFTCAP,
    }  # fmt: skip

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.tied = True  # no output table: the scale folds into the only one
        self.readout_multiplier = 1.0  # the head is not exported

    def config(self) -> dict[str, Any]:
        cfg = self.cfg
        config = {
            **self.common_config(),
            "model_type": "bert",
            "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.ff_dim,
            "hidden_act": ACTIVATIONS[cfg.ffn], "max_position_embeddings": cfg.max_len,
            "type_vocab_size": 1, "layer_norm_eps": 1e-5,
            "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attn_dropout,
            "position_embedding_type": "absolute", "is_decoder": False,
        }  # fmt: skip
        config.pop("tie_word_embeddings")
        return config

    def tensors(self) -> dict[str, Tensor]:
        encoder = self.model.encoder
        words, _ = self.tables()
        out = {
            "embeddings.word_embeddings.weight": words,
            "embeddings.position_embeddings.weight": encoder.positions.table.weight.detach(),
            "embeddings.token_type_embeddings.weight": torch.zeros(1, self.cfg.d_model),
        }
        out |= _norm("embeddings.LayerNorm", encoder.embed_norm)
        for i, layer in enumerate(encoder.layers):
            p = f"encoder.layer.{i}."
            attention = layer.self_attn
            q, k, v, bq, bk, bv = _split_projection(attention, self.query_scale(attention))
            out |= {
                p + "attention.self.query.weight": q, p + "attention.self.query.bias": bq,
                p + "attention.self.key.weight": k, p + "attention.self.key.bias": bk,
                p + "attention.self.value.weight": v, p + "attention.self.value.bias": bv,
            }  # fmt: skip
            out |= _linear(p + "attention.output.dense", attention.out_proj)
            out |= _norm(p + "attention.output.LayerNorm", layer.attn_residual.norm)
            out |= _linear(p + "intermediate.dense", layer.ffn.linear1)
            out |= _linear(p + "output.dense", layer.ffn.linear2)
            out |= _norm(p + "output.LayerNorm", layer.ffn_residual.norm)
        return out

    def layers(self) -> Any:
        return self.model.encoder.layers


MAPPINGS: tuple[type[Mapping], ...] = (GPT2Mapping, LlamaMapping, BertMapping, Gemma2Mapping,
                                        Gemma3Mapping, Qwen35Mapping)
# what makes a decoder "Llama-like": a mismatch is then reported against Llama, not GPT-2
LLAMA_SIGNS = {"norm_type": ("rmsnorm",), "pos": ("rope",), "ffn": tuple(GATES)}
GEMMA_SIGNS = {"ffn": "geglu", "norm": "sandwich"}  # both, or either soft-cap


def choose_mapping(cfg: ModelConfig, task: str) -> type[Mapping]:
    """The mapping that computes this model exactly, or a ConfigError naming the option."""
    if cfg.get("ffn") == "moe":  # Mixtral's, Qwen2-MoE's, DeepSeek-V3's routers are not mapped
        raise ConfigError(
            "format=hf: model.ffn=moe (a mixture of experts) has no exact Hugging Face "
            "equivalent here; use format=native"
        )
    if cfg.get("attention") == "mamba2":  # a Mamba-2 block there has no FFN sublayer
        raise ConfigError(
            "format=hf: model.attention=mamba2 has no exact Hugging Face equivalent (attnlab "
            "layers put an FFN after the mixer; Mamba2ForCausalLM has none); use format=native"
        )
    if cfg.get("attention") == "mla":  # DeepseekV3Attention normalises its latents
        raise ConfigError(
            "format=hf: model.attention=mla (multi-head latent attention) has no exact Hugging "
            "Face equivalent here (DeepseekV3ForCausalLM's adds RMSNorms on c^Q and c^KV and "
            "comes with its mixture of experts); use format=native"
        )
    if cfg.name == "encoder_only":
        return _checked(BertMapping, cfg)
    if cfg.name != "decoder_only":
        raise ConfigError(
            "format=hf exports model=decoder_only (as GPT2LMHeadModel or LlamaForCausalLM) "
            f"and model=encoder_only (as BertModel); model={cfg.name} has no exact Hugging "
            "Face equivalent here: use format=native"
        )
    if task not in ("lm", "seq2seq"):
        raise ConfigError(
            f"format=hf exports language models; this run was trained on {task} data, whose "
            "classification head has no counterpart in a causal-LM class: use format=native"
        )
    if cfg.get("attention") == "gated_deltanet":
        return _checked(Qwen35Mapping, cfg)
    capped = [k for k in NO_SOFTCAP if cfg.get(k) is not None]
    theta_local = cfg.get("rope_theta_local")
    if theta_local is not None:  # a RoPE base per layer type: Gemma 3's alone
        why = (f"model.rope_theta_local={theta_local} is Gemma 3's RoPE base of the local "
               "layers, which only Gemma3ForCausalLM computes, and ")
        return _checked(Gemma3Mapping, cfg, why)
    if capped or all(cfg.get(k) == v for k, v in GEMMA_SIGNS.items()):
        gemma = Gemma3Mapping if cfg.qk_norm else Gemma2Mapping  # Gemma 3 norms q and k
        why = ""
        if capped:  # say why this class: the soft-cap is never exported as something else
            why = (f"model.{capped[0]}={_shown(cfg.get(capped[0]))} is Gemma 2's logit "
                   f"soft-capping, which only {gemma.hf_class} computes, and ")  # fmt: skip
        return _checked(gemma, cfg, why)
    llama_like = any(getattr(cfg, k) in v for k, v in LLAMA_SIGNS.items())
    return _checked(LlamaMapping if llama_like else GPT2Mapping, cfg)


def _checked(mapping: type[Mapping], cfg: ModelConfig, why: str = "") -> type[Mapping]:
    """``mapping`` where it computes ``cfg`` exactly; else the first option it cannot, and
    ``why`` this class was the one to ask."""
    problem = mapping.mismatch(cfg)
    if problem is not None:
        raise ConfigError(
            f"format=hf: {why}{problem} has no equivalent in {mapping.hf_class}; export a "
            "model with that option as listed, or use format=native"
        )
    return mapping


def export_weights(model: Any, task: str) -> tuple[dict[str, Any], dict[str, Tensor], str]:
    """(config.json's dict, the safetensors tensors, the Hugging Face class) of ``model``."""
    mapping = choose_mapping(model.cfg, task)(model)
    tensors = {name: t.contiguous().float() for name, t in mapping.tensors().items()}
    config = mapping.config()
    config["attnlab_folds"] = folds(mapping)
    return config, tensors, mapping.hf_class


def folds(mapping: Mapping) -> list[str]:
    """What the export folded into the weights, for the model card."""
    notes = []
    if mapping.embedding_scale != 1.0 and not mapping.scales_embeddings:
        notes.append(
            f"the token embedding's scale √d_model = {mapping.embedding_scale:.6g} is folded "
            "into the input table"
        )
    if mapping.readout_multiplier != 1.0:
        notes.append(f"μP's readout multiplier {mapping.readout_multiplier:.6g} is folded "
                     "into the output projection")  # fmt: skip
    scales = {mapping.query_scale(layer.self_attn) for layer in mapping.layers()}
    if scales != {1.0}:
        shown = ", ".join(f"{s:.6g}" for s in sorted(scales))
        notes.append(f"μP's query scale ({shown}) is folded into W_Q and its bias")
    if mapping.hf_class == "BertModel":
        notes.append("BertModel carries the encoder's states; attnlab's output head is not "
                     "exported (BERT's MLM head and pooler compute other functions)")  # fmt: skip
    elif not mapping.tied and mapping.cfg.tie != "none":
        notes.append("the input and output tables are stored separately, as they now differ")
    return notes


def check_finite(tensors: dict[str, Tensor]) -> None:
    bad = next((name for name, t in tensors.items() if not torch.isfinite(t).all()), None)
    if bad is not None:
        raise ConfigError(f"the weights hold NaN or inf ({bad}); export a checkpoint from "
                          "before the run diverged (ckpt_path=…)")  # fmt: skip
