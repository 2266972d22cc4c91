"""``run.py --ray``: learners in Ray actors. Only `learner`, `actor` and `advice` import ray, and only
``run.py --ray`` imports them; `metrics` stays ray-free. This package's own module imports nothing."""
