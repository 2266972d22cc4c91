"""Rate limits per key and the failed-login throttle, with an explicit clock."""

import pytest

from shepherd.http.limits import LoginThrottle, RateLimiter, TooManyRequests
from shepherd.wire.replies import retry_after_header


def test_a_bucket_allows_its_burst_then_refuses_until_tokens_come_back():
    limiter = RateLimiter(rate=10, burst=3)
    for _ in range(3):
        limiter.take("key", now=100.0)
    with pytest.raises(TooManyRequests) as refused:
        limiter.take("key", now=100.0)
    assert refused.value.retry_after == pytest.approx(0.1)
    limiter.take("other", now=100.0)  # keys have their own buckets
    limiter.take("key", now=100.11)  # one token back after 1/rate seconds
    with pytest.raises(TooManyRequests):
        limiter.take("key", now=100.12)


def test_buckets_are_bounded_in_number():
    limiter = RateLimiter(rate=1, burst=1, capacity=100)
    for i in range(1000):
        limiter.take(f"key-{i}", now=0.0)
    assert len(limiter._buckets) == 100


def test_failed_logins_are_free_at_first_then_slowed_down_doubling_up_to_a_cap():
    throttle = LoginThrottle(free=3, window=60, base_delay=0.5, max_delay=4)
    delays = [throttle.failed("10.0.0.1", now=float(i)) for i in range(8)]
    assert delays == [0, 0, 0, 0.5, 1, 2, 4, 4]
    assert throttle.failed("10.0.0.2", now=8.0) == 0  # another address is not slowed
    assert throttle.failed("10.0.0.1", now=100.0) == 0  # the window passed


def test_a_blocked_address_is_refused_before_its_credential_is_tried_and_nothing_resets_it():
    throttle = LoginThrottle(free=2, window=60, base_delay=1, max_delay=8)
    for _ in range(2):
        throttle.check("10.0.0.1", now=0.0)
        assert throttle.failed("10.0.0.1", now=0.0) == 0
    throttle.check("10.0.0.1", now=0.0)
    assert throttle.failed("10.0.0.1", now=0.0) == 1  # the third failure blocks the address for 1 s ...
    for _ in range(50):  # ... and parallel attempts meanwhile are refused untried, not counted
        with pytest.raises(TooManyRequests) as refused:
            throttle.check("10.0.0.1", now=0.5)
        assert refused.value.retry_after == pytest.approx(0.5)
    throttle.check("10.0.0.2", now=0.5)  # another address is free
    throttle.check("10.0.0.1", now=1.0)
    assert throttle.failed("10.0.0.1", now=1.0) == 2  # doubling on: a good login between changes nothing
    assert not hasattr(throttle, "succeeded")


def test_retry_after_is_whole_seconds_and_never_zero():
    assert retry_after_header(0.01) == "1" and retry_after_header(1.2) == "2" and retry_after_header(3) == "3"


def test_the_login_throttle_counts_an_ipv6_64_as_one_address_and_ipv4_addresses_apart():
    """Issue 48, L11: failures from many addresses of one IPv6 /64 add up (and block all of it); IPv4 addresses,
    and an IPv4 address written IPv4-mapped, count as themselves."""
    throttle = LoginThrottle(free=2, base_delay=10.0, max_delay=10.0)
    for host in range(1, 4):
        throttle.failed(f"2001:db8::{host}", now=0.0)
    with pytest.raises(TooManyRequests):
        throttle.check("2001:db8::ffff:1234", now=1.0)
    throttle.check("2001:db8:0:1::1", now=1.0)  # the next /64
    for host in range(1, 4):
        throttle.failed(f"198.51.100.{host}", now=0.0)
    throttle.check("198.51.100.4", now=1.0)
    throttle.failed("::ffff:198.51.100.1", now=0.0)
    throttle.failed("198.51.100.1", now=0.0)
    with pytest.raises(TooManyRequests):
        throttle.check("198.51.100.1", now=1.0)
