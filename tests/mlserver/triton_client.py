"""The real KServe v2 client, tritonclient.http, against the gateway.

Usage: python triton_client.py HOST:PORT [--binary] MODEL [MODEL...]

Checks what a tritonclient user does: server live and ready, then
inference (which, through the gateway, loads a model not loaded: a
metadata or readiness GET never does), model ready and metadata, with
JSON tensors or, with --binary,
with the binary tensor extension (inputs and outputs as raw bytes after
a JSON header, `Inference-Header-Content-Length`), each answer compared
with what was sent (the runtime echoes its inputs). Prints one line per
model and exits non-zero on the first mismatch.

MLServer 1.7.1 does not speak the binary extension (it answers 422);
KServe 0.21 does, but reads a JSON body sent without `Content-Type`
(as tritonclient sends it) as bytes and answers 400: so JSON against
MLServer, binary against KServe.
"""
import sys
import time

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def main() -> int:
    url, models = sys.argv[1], sys.argv[2:]
    binaries = (False,)
    if models and models[0] == "--binary":
        binaries, models = (True,), models[1:]
    client = httpclient.InferenceServerClient(url=url, concurrency=1)
    assert client.is_server_live(), "server not live"
    assert client.is_server_ready(), "server not ready"
    metadata = client.get_server_metadata()
    assert "name" in metadata, metadata
    # An error reads as KServe v2 says: {"error": "message"}.
    try:
        client.get_model_metadata("no-such-model")
        raise AssertionError("metadata of a model nobody has")
    except InferenceServerException as error:
        assert "no-such-model" in str(error), str(error)
    for i, model in enumerate(models):
        data = np.arange(6, dtype=np.float32).reshape(2, 3) + i
        for binary in binaries:
            tensor = httpclient.InferInput("x", list(data.shape), "FP32")
            tensor.set_data_from_numpy(data, binary_data=binary)
            wanted = httpclient.InferRequestedOutput("echo_x", binary_data=binary)
            result = client.infer(model, inputs=[tensor], outputs=[wanted])
            got = result.as_numpy("echo_x")
            assert got is not None, f"{model}: no echo_x in {result.get_response()}"
            assert np.array_equal(got.reshape(data.shape), data), f"{model}: {got} != {data}"
        # Only inference loads a model (with placement on, the gateway
        # loads it on its owner first); readiness and metadata then come
        # from the server that holds it, once the gateway knows it there
        # (at once from its own load, else by its next probe: waited for,
        # at most 5 s).
        for _ in range(50):
            if client.is_model_ready(model):
                break
            time.sleep(0.1)
        assert client.is_model_ready(model), f"{model} not ready"
        meta = client.get_model_metadata(model)
        assert meta["name"] == model, meta
        kinds = " and ".join("binary" if b else "JSON" for b in binaries)
        print(f"tritonclient: {model} {kinds} inference ok, ready, metadata")
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
