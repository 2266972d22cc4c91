"""The deploy server (``run.py deploy policy.onnx``): the client protocol answered by an exported policy, in
evaluate mode, with onnxruntime and numpy only. Nothing here imports torch, stable-baselines3 or the learning
code (``agents``, ``level``, ``graph``, ``http``); it shares the protocol's parsing with the learning server
through `shepherd.wire`."""
