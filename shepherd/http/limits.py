"""The learning server's rate limit and login throttle: `shepherd.wire.limits` (free of torch, so that the
deploy server throttles failed logins as this server does), under their old names here."""

from shepherd.wire.limits import LoginThrottle, RateLimiter, TooManyRequests

__all__ = ["LoginThrottle", "RateLimiter", "TooManyRequests"]
