"""Timing for tests that run on a loaded machine: generous deadlines for
outcomes, and bounds on how long a call takes that a starved test process
still meets.

A 2-core machine running several suites starves this process for seconds
at a time (a 50 ms wait has been seen to take 5.5 s), so no single timing
may be held to a tight bound. A client that does not honour its deadline
is slow on every call; a starved test process is slow on a few."""

import math
import time

# The deadline for an outcome to be observed (a daemon up, a counter moved).
PATIENT = 60.0
# dial_timeout for clients whose dialing is not what a test is about.
DIAL_PATIENT = 30.0
# How many calls fastest() makes at most before it gives up.
TRIES = 8


def fastest(call, bound, tries=TRIES):
    """Call ``call()`` until one call takes under ``bound`` seconds, at most
    ``tries`` times. Returns (results, best seconds) for the test to assert
    ``best < bound`` and to check each result."""
    results, best = [], math.inf
    for _ in range(tries):
        t0 = time.monotonic()
        results.append(call())
        best = min(best, time.monotonic() - t0)
        if best < bound:
            break
    return results, best


async def afastest(call, bound, tries=TRIES):
    """fastest() for a coroutine function ``call``."""
    results, best = [], math.inf
    for _ in range(tries):
        t0 = time.monotonic()
        results.append(await call())
        best = min(best, time.monotonic() - t0)
        if best < bound:
            break
    return results, best
