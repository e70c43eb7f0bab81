"""The prompt token IDs vLLM computes, for tests/kv_tokenizer.rs.

Runs vLLM's own code path for a request, without a server: the
request's pydantic model (ChatCompletionRequest, CompletionRequest),
its chat parameters, `parse_chat_messages`, `safe_apply_chat_template`
(transformers' `apply_chat_template` with tokenize=False, as vLLM calls
it for HF tokenizers), then the tokenizer's `encode` with the request's
`add_special_tokens` -- what `OnlineRenderer.preprocess_chat` and
`HfRenderer.render_messages` do, minus multimodal data and truncation.

Input: one JSON object a line on stdin, {"dir", "kind": "chat" |
"completion", "body"}. Output: one JSON object a line, {"ids", "text"}
or {"error"}.
"""

import json
import sys
import types

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.renderers.chat_utils import parse_chat_messages
from vllm.renderers.hf import (
    resolve_chat_template_content_format,
    safe_apply_chat_template,
)
from vllm.renderers.params import merge_kwargs
from vllm.tokenizers import get_tokenizer

TOKENIZERS = {}


def model_config(path):
    return types.SimpleNamespace(
        multimodal_config=None,
        enable_prompt_embeds=False,
        tokenizer=path,
        model=path,
        tokenizer_revision=None,
        revision=None,
        code_revision=None,
        trust_remote_code=False,
        hf_config=types.SimpleNamespace(model_type="llama"),
        max_model_len=None,
    )


def chat(tok, mc, body):
    req = ChatCompletionRequest.model_validate(body)
    tool_dicts = None if req.tools is None else [t.model_dump() for t in req.tools]
    params = req.build_chat_params(None, "auto").with_defaults(
        merge_kwargs(None, dict(tools=tool_dicts, tokenize=False))
    )
    kwargs = params.get_apply_chat_template_kwargs()
    fmt = resolve_chat_template_content_format(
        params.chat_template, kwargs.get("tools"), "auto", tok, model_config=mc
    )
    conversation, _, _ = parse_chat_messages(req.messages, mc, fmt)
    text = safe_apply_chat_template(mc, tok, conversation, **kwargs)
    return text, tok.encode(text, add_special_tokens=req.add_special_tokens)


def completion(tok, body):
    req = CompletionRequest.model_validate(body)
    prompt = req.prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, tok.encode(prompt, add_special_tokens=req.add_special_tokens)
    return None, list(prompt)


def main():
    for line in sys.stdin:
        case = json.loads(line)
        path = case["dir"]
        if path not in TOKENIZERS:
            TOKENIZERS[path] = (get_tokenizer(path), model_config(path))
        tok, mc = TOKENIZERS[path]
        try:
            if case["kind"] == "chat":
                text, ids = chat(tok, mc, case["body"])
            else:
                text, ids = completion(tok, case["body"])
            out = {"ids": list(ids), "text": text}
        except Exception as e:  # the Rust side expects an error too
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
