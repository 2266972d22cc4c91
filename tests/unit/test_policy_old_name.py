"""The old import path ``shepherd.policy`` (issue 48, L16): moved to ``shepherd.policies.onnx``, it still imports,
with a DeprecationWarning naming the new path, and gives the same objects."""

from __future__ import annotations

import importlib
import sys

import pytest

import shepherd.policies.onnx as onnx_policy


def test_the_old_module_name_still_imports_with_a_deprecation_warning(monkeypatch):
    monkeypatch.delitem(sys.modules, "shepherd.policy", raising=False)  # imported afresh: the warning is at import
    with pytest.warns(DeprecationWarning, match=r"shepherd\.policies\.onnx"):
        old = importlib.import_module("shepherd.policy")
    assert old.Policy is onnx_policy.Policy and old.PolicyError is onnx_policy.PolicyError
    assert old.FORMAT == onnx_policy.FORMAT and old.METADATA_KEY == onnx_policy.METADATA_KEY


def test_from_the_old_module_import_policy_works(monkeypatch):
    monkeypatch.delitem(sys.modules, "shepherd.policy", raising=False)
    with pytest.warns(DeprecationWarning):
        from shepherd.policy import Policy, PolicyError  # a user's line from before the move
    assert (Policy, PolicyError) == (onnx_policy.Policy, onnx_policy.PolicyError)
