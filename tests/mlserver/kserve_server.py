"""KServe's own Python model server (kserve 0.21) with the same tiny
models as sleepy.py: each `load_seconds` to load (at start), each
inference `predict_seconds`, answering its input tensors back.

Usage: python kserve_server.py --http_port=P [--load_seconds=S]
       [--predict_seconds=S] --model=m0 --model=m1 ...
(kserve reads its own flags, --http_port among them, from the same line.)
"""
import argparse
import asyncio
import time

import kserve
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer


class SleepyModel(Model):
    def __init__(self, name: str, load_seconds: float, predict_seconds: float):
        super().__init__(name)
        self.load_seconds = load_seconds
        self.predict_seconds = predict_seconds

    def load(self) -> bool:
        time.sleep(self.load_seconds)
        self.ready = True
        return self.ready

    async def predict(self, payload, headers=None, response_headers=None):
        await asyncio.sleep(self.predict_seconds)
        if not isinstance(payload, InferRequest):
            return {"predictions": payload.get("instances", [])}
        outputs = [
            InferOutput(
                name=f"echo_{tensor.name}",
                shape=list(tensor.shape),
                datatype=tensor.datatype,
                data=list(tensor.data),
            )
            for tensor in payload.inputs
        ]
        return InferResponse(
            response_id=payload.id or "0", model_name=self.name, infer_outputs=outputs
        )


def main() -> None:
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser], add_help=False)
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--load_seconds", type=float, default=0.5)
    parser.add_argument("--predict_seconds", type=float, default=0.01)
    args, _ = parser.parse_known_args()
    models = []
    for name in args.model:
        model = SleepyModel(name, args.load_seconds, args.predict_seconds)
        model.load()
        models.append(model)
    ModelServer(http_port=args.http_port, enable_grpc=False).start(models)


if __name__ == "__main__":
    main()
