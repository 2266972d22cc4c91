"""The old name of `shepherd.policies.onnx` (moved there in the layout of shepherd/policies/): its names, with a
DeprecationWarning at import, so that a user's ``from shepherd.policy import Policy`` keeps working for now."""

from __future__ import annotations

import warnings

from shepherd.policies.onnx import ACTION_OUTPUT, FORMAT, MASK_INPUT, METADATA_KEY, Policy, PolicyError

__all__ = ["ACTION_OUTPUT", "FORMAT", "MASK_INPUT", "METADATA_KEY", "Policy", "PolicyError"]

warnings.warn("shepherd.policy is now shepherd.policies.onnx; import Policy from there (this old name will go)",
              DeprecationWarning, stacklevel=2)
