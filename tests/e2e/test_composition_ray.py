"""The Ray cells of docs/composition.md (issue 45): every session shape of every agent kind, with and without
lessons, with the agent's learners in Ray actors on a local Ray started as run.py --ray starts it (`RayLink`,
`RayLearners`): served and learned from, or refused with the table's reason. The in-process cells and the runner
are tests/integration/test_composition.py's."""

import os

import pytest

from tests.integration.test_composition import cells, run_cell

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")


@pytest.fixture(scope="module")
def ray_link():
    """A local Ray started by the head's `RayLink`, as run.py --ray starts it (with its token authentication, which
    this process's later Rays then share: tests/e2e/test_ray_node_death.py); this test process is its driver."""
    from ray._private import ray_constants

    from shepherd.agents.ray.cluster import link

    saved = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    joined = link(None)
    try:
        yield joined
    finally:
        joined.close()
        ray_constants.ENABLE_RAY_CLUSTER = True
        if saved is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = saved


@pytest.mark.parametrize("cell", cells("ray"), ids=lambda c: c.name)
async def test_each_ray_cell_is_served_or_refused_as_the_table_says(cell, ray_link, tmp_path):
    from shepherd.agents.ray.cluster import RayLearners
    await run_cell(cell, tmp_path, RayLearners(link=ray_link))
