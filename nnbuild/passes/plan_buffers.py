"""Liveness-based buffer planning (switch): marks the model so the CNN code shapes (v1, v2, v3)
place activation tensors in one arena by lifetime, reusing memory of dead tensors and computing
element-wise layers in place. The generator reports the resulting peak activation bytes (and
what one buffer per tensor would take) in the trace. Without this pass every tensor gets its own
buffer. The MLP shape keeps its own two ping-pong buffers either way."""

import dataclasses


def plan_buffers(model):
    return dataclasses.replace(model, meta=dict(model.meta, plan_buffers=True)), []
