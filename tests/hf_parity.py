"""The Hugging Face side of the export parity tests, run as its own process with
``transformers`` on its path (tests/test_export.py starts it).

    python tests/hf_parity.py <cases.json> <out folder>

Each case names an exported folder, token ids and a text. For each, ``from_pretrained``
loads the model and the tokenizer; the process writes the logits for the ids
(``<name>.safetensors``) and, in ``results.json``, the loading report, the greedy
continuation and the tokenizer's ids for the text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer


def run_case(case: dict, out: Path) -> dict:
    encoder = case["max_new_tokens"] == 0  # BertModel: the encoder's states, no generation
    auto, extra = AutoModelForCausalLM, {}
    if encoder:
        auto, extra = AutoModel, {"add_pooling_layer": False}
    model, info = auto.from_pretrained(
        case["folder"], output_loading_info=True, use_kernels=False, **extra  # no kernel hub
    )
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(case["folder"])
    ids = torch.tensor(case["ids"])
    with torch.no_grad():
        output = model(ids)
        logits = output.last_hidden_state if encoder else output.logits
        generated = ids[:, :0] if encoder else model.generate(
            ids, max_new_tokens=case["max_new_tokens"], do_sample=False,
            attention_mask=torch.ones_like(ids),
        )[:, ids.size(1):]
    save_file({"logits": logits.contiguous()}, str(out / f"{case['name']}.safetensors"))
    return {
        "class": type(model).__name__,
        "loading": {k: sorted(map(str, v)) for k, v in info.items()},
        "generated": generated.tolist(),
        "text_ids": tokenizer(case["text"], add_special_tokens=False)["input_ids"],
        "decoded": tokenizer.decode(tokenizer(case["text"], add_special_tokens=False)["input_ids"]),
    }


def main() -> None:
    cases, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    torch.manual_seed(0)
    results = {case["name"]: run_case(case, out) for case in cases}
    (out / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
