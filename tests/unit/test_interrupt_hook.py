"""The optimiser hook that ends an update when its learner is discarded is installed when a learner starts, not
when Shepherd is imported (issue 45: no wiring by import side effects), and then ends an update at its next
optimiser step on a worker thread whose stop was asked."""

import subprocess
import sys
import threading

import pytest
import torch

from tests.conftest import ROOT

CHECK = """
import torch.optim.optimizer as optimizer
import shepherd.agents.worker, shepherd.graph, shepherd.http  # everything a server imports
before = len(optimizer._global_optimizer_pre_hooks)
from shepherd.agents.algorithm import install_interrupt_hook
install_interrupt_hook(); install_interrupt_hook()
print(before, len(optimizer._global_optimizer_pre_hooks))
"""


def test_importing_shepherd_installs_no_hook_and_a_learner_start_installs_one_once():
    result = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0", "1"]


def test_an_optimiser_step_on_a_stopping_workers_thread_is_interrupted():
    from shepherd.agents.algorithm import WORKER, UpdateInterrupted, install_interrupt_hook

    install_interrupt_hook()
    weight = torch.nn.Parameter(torch.ones(1))
    step = torch.optim.SGD([weight], lr=0.1)
    caught: list[BaseException] = []

    def update(stop: bool) -> None:
        WORKER.interrupt = threading.Event()
        if stop:
            WORKER.interrupt.set()
        try:
            weight.grad = torch.ones(1)
            step.step()
        except UpdateInterrupted as error:
            caught.append(error)

    for stop in (False, True):
        thread = threading.Thread(target=update, args=(stop,))
        thread.start()
        thread.join(10)
    assert len(caught) == 1 and weight.item() == pytest.approx(0.9)  # the first step ran, the second ended
