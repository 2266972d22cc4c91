"""The client protocol as both servers speak it, free of torch and the learning code: bodies parsed and checked
once into typed values (`steps`, `parse`), the JSON space syntax (`spaces`), the error replies (`replies`) and
the connection guard (`connections`) of the learning server, the deploy server and the front ends."""

from shepherd.wire.parse import (LOGIN_FIELDS, STEP_FIELDS, Login, parse_greedy_step, parse_login, parse_object,
                                 parse_step, parse_vector_step, session_key)
from shepherd.wire.steps import (BadRequest, EnvSteps, GreedyStep, GreedyVectorStep, MaskCheck, Step, StepInput,
                                 StepTaker, VectorStepInput, fingerprint, greedy_step, greedy_vector_step, vector_fingerprint)

__all__ = ["LOGIN_FIELDS", "STEP_FIELDS", "BadRequest", "EnvSteps", "GreedyStep", "GreedyVectorStep", "Login",
           "MaskCheck", "Step", "StepInput", "StepTaker", "VectorStepInput", "fingerprint", "greedy_step", "greedy_vector_step",
           "parse_greedy_step", "parse_login", "parse_object", "parse_step", "parse_vector_step", "session_key",
           "vector_fingerprint"]
