"""The Ray cells of docs/composition.md (issue 45): every session shape of every agent kind, with and without
lessons, with the agent's learners in Ray actors (`RayLearners`, as run.py --ray builds them) on a local
two-node cluster: served and learned from, or refused with the table's reason. The in-process cells and the
runner are tests/integration/test_composition.py's."""

import pytest

from tests.integration.test_composition import cells, run_cell

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")



@pytest.fixture(scope="module")
def ray_cluster():
    """One Ray node on 127.0.0.1 of two logical CPUs; this test process is its driver."""
    ray.init(num_cpus=2, include_dashboard=False, namespace="shepherd-composition", log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.mark.parametrize("cell", cells("ray"), ids=lambda c: c.name)
async def test_each_ray_cell_is_served_or_refused_as_the_table_says(cell, ray_cluster, tmp_path):
    from shepherd.agents.ray.cluster import RayLearners
    await run_cell(cell, tmp_path, RayLearners())
