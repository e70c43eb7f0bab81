"""The official `openai` client against one base URL (a vLLM server, or
the gateway in front of two): the calls a user makes, with what they
returned printed as one JSON object for tests/real_vllm to compare.

Usage: python openai_client.py BASE_URL MODEL
"""

import json
import sys

from openai import OpenAI


def main():
    base, model = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    out = {}
    out["models"] = sorted(m.id for m in client.models.list())
    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "def parse(path):"}],
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    out["chat"] = {
        "text": chat.choices[0].message.content,
        "finish_reason": chat.choices[0].finish_reason,
        "completion_tokens": chat.usage.completion_tokens,
        "prompt_tokens": chat.usage.prompt_tokens,
    }
    completion = client.completions.create(
        model=model,
        prompt="import os\nimport sys\n",
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    out["completion"] = {
        "text": completion.choices[0].text,
        "completion_tokens": completion.usage.completion_tokens,
    }
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "class Reader:"}],
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks, text, usage = 0, "", None
    for chunk in stream:
        chunks += 1
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage is not None:
            usage = {
                "completion_tokens": chunk.usage.completion_tokens,
                "prompt_tokens": chunk.usage.prompt_tokens,
            }
    out["stream"] = {"chunks": chunks, "text": text, "usage": usage}
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
