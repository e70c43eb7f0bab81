"""Builds the tiny model the real-vLLM tests serve (tests/real_vllm.rs).

No model hub is reachable from CI, so the model is made here: a
random-weight LlamaForCausalLM (hidden 128, intermediate 256, 2 layers,
4 heads of 32, float32: about 1.4 M parameters with its 4,096-token
vocabulary) and a byte-level BPE tokenizer trained on the Python standard
library's sources, with a plain chat template. It generates nonsense,
fast: what the tests need is vLLM's real server around it (the OpenAI
API, streaming, its scheduler, prefix cache and metrics), not the words.

Usage: python build_model.py OUT_DIR
The folder is written whole under a temporary name, then renamed: a
folder at OUT_DIR is always complete.
"""

import json
import os
import shutil
import sys
import sysconfig
import tempfile

# Chat messages as plain lines, then the assistant's turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

VOCAB = 4096
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]


def corpus():
    """Python source files of the standard library, a few MB of text."""
    root = sysconfig.get_paths()["stdlib"]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in sorted(dirnames) if d not in ("site-packages", "test", "tests")]
        files.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
    return files[:400]


def build_tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 2048
    fast.save_pretrained(out)
    return fast


def build_model(out, tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(39)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    # Plain sampling defaults: vLLM reads generation_config.json.
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(
            {
                "bos_token_id": tokenizer.bos_token_id,
                "eos_token_id": tokenizer.eos_token_id,
                "pad_token_id": tokenizer.pad_token_id,
            },
            f,
        )


def main():
    out = os.path.abspath(sys.argv[1])
    if os.path.exists(os.path.join(out, "config.json")):
        return
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".tiny-", dir=parent)
    try:
        tokenizer = build_tokenizer(work)
        build_model(work, tokenizer)
        os.rename(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    print(f"built {out}")


if __name__ == "__main__":
    main()
