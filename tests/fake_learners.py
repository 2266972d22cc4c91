"""A fake learner's `Learner.ask` and `Learner.tell` (the requests a level hands over) dispatched to the
episode calls that the fake records (``begin_episode``, ``step``, ``end_episode``, ``end_actor``)."""

from shepherd.agents.core import Kind


class RequestsAsCalls:
    """Mixed into a fake learner that defines the four episode calls."""

    def ask(self, request):
        if request.kind is Kind.BEGIN:
            return self.begin_episode(request.actor, request.obs, request.mode, request.mask)
        assert request.kind is Kind.STEP, request
        return self.step(request.actor, request.reward, request.obs, request.mode, request.mask)

    def tell(self, request):
        if request.kind is Kind.END:
            self.end_episode(request.actor, request.reward, request.obs, request.truncated, request.mode)
        else:
            assert request.kind is Kind.DROP, request
            self.end_actor(request.actor)
