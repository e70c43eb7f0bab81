"""A tiny MLServer runtime for the real-server tests: loading takes
`load_seconds`, each inference `predict_seconds` (model-settings
parameters.extra), and it answers its input tensors back unchanged.
`fail_load` / `fail_predict` (true) make a broken model: its load, or
every inference, fails (MLServer answers 500).

No weights, no framework: the tests measure routing, not models.
"""
import asyncio

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


class SleepyModel(MLModel):
    async def load(self) -> bool:
        extra = (self.settings.parameters.extra or {}) if self.settings.parameters else {}
        self._load_seconds = float(extra.get("load_seconds", 0.5))
        self._predict_seconds = float(extra.get("predict_seconds", 0.01))
        self._fail_predict = bool(extra.get("fail_predict", False))
        await asyncio.sleep(self._load_seconds)
        if extra.get("fail_load", False):
            raise RuntimeError(f"{self.name}: this model cannot load")
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        await asyncio.sleep(self._predict_seconds)
        if self._fail_predict:
            raise RuntimeError(f"{self.name}: every inference fails")
        outputs = [
            ResponseOutput(
                name=f"echo_{tensor.name}",
                shape=tensor.shape,
                datatype=tensor.datatype,
                data=tensor.data,
            )
            for tensor in payload.inputs
        ]
        return InferenceResponse(model_name=self.name, id=payload.id, outputs=outputs)
