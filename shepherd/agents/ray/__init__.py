"""``run.py --ray``: learners in Ray actors: each served agent's learner runs in a named actor, wherever
Ray places it, behind the calls of an in-process `ThreadedLearner`.

What crosses the process boundary is plain data only: lists of `Request` in, lists of `Answer` out (with
the learner's counters, its measurements, what its SB3 logger recorded (`shepherd.agents.ray.metrics`)
and, when asked, its published weights), checkpoint bytes out and in. No future, callable or client-sent
object is unpickled from the head's side of a call.

- `LearnerActor` (the actor, named ``shepherd-learner/<agent id>`` in namespace ``shepherd``, or
  ``shepherd-learner/<agent id>/<client>`` for each client of an advised agent) builds the ordinary
  learner with the registry's factory (`learner_for`) and runs its `ThreadedLearner` there, with its
  answers relayed back (`ThreadedLearner.relay`) instead of set on futures (`shepherd.agents.ray.actor`).
- `RayLearner` (on the head) keeps the callers' futures by ticket and sends everything pending for its
  actor as one remote call, one call in flight at a time (the next batch collects meanwhile); the answers
  are delivered on the caller's thread with the ``deliver`` given to `start`, as a `ThreadedLearner` does.
  Greedy steps are answered on the head from a `GreedyPolicy` snapshot of the actor's published weights
  (and its observation statistics, sent with them).
- Checkpoints are written where the store is: the actor returns the checkpoint's bytes and the head
  writes them atomically; a restore reads the head's file and sends its bytes.
- An actor that dies (its node removed, its process killed) is created again, on any node, and restored
  from the head's last checkpoint before it answers; meanwhile every step fails with
  `LearnerUnavailable` (HTTP 503 with Retry-After), and a client's retry of the same ``seq`` is handed to
  the new actor without being counted twice (`shepherd.graph.sessions`).

An advised client's advice is forwarded to its actor as plain data, and read there from its advisor's
actor (`shepherd.agents.ray.advice`).

A local Ray (``run.py --ray`` alone) whose node dies is replaced by a new local Ray, where every learner's
actor is created again from the head's last checkpoint (`shepherd.agents.ray.link`); on a cluster, a learner
that no node can place is waited for.

The modules: `cluster` (connect to Ray, build served learners there: `RayLearners`), `link` (`RayLink`: the
local Ray watched and started again, the gate of the head's ray calls), `learner` (the head's
`RayLearner`: batching its calls to the actor), `revival` (a lost actor created again and restored), `status`
(the head's view of the actor's counters and weights), `actor` (`LearnerActor`, `Reply`), `advice` (an
advised client's advice as plain data), `metrics` (what the actor's SB3 logger records; ray-free), `uploads`
(a client-acting session's calls sent to the actor, one unit per upload; ray-free).

Only `cluster`, `link`, `learner`, `revival`, `actor` and `advice` import ray, and only ``--ray`` imports them
(`cluster.connect`); this package's own module imports nothing.
"""
