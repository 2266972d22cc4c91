"""A learner's policy written as ONNX: the greedy policy file (`export`), built node by node from the
policy's layers (`onnx_graph`), and the behaviour policy a client acts with (`behaviour`)."""
