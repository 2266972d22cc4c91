"""Policies that act without the learning code, with numpy (and onnxruntime): the greedy path of a small policy
as plain data (`greedy`), a learner's published greedy policy as bytes (`snapshots`), an exported ONNX file
(`onnx`), and the action side of the transform stage (`transforms`). Never imports torch."""
