"""Rough figures for the Python client against a running sluiced:
    python3 bench.py SOCKET [N]
prints p50/p99 of one caller's sync calls, decisions/s with 8 threads
sharing one Client, and with 64 asyncio tasks sharing one AsyncClient.
Each call is a CHECK on rule `bench` (give it a large rate) with its own key."""

import asyncio
import sys
import threading
import time

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import sluice  # noqa: E402
from sluice.aio import AsyncClient  # noqa: E402


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    c = sluice.Client.dial(socket_path=path, timeout=1.0)
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        d = c.allow("bench", "k%d" % (i % 1000))
        lat.append(time.perf_counter() - t0)
        assert not d.failed_open, d
    lat.sort()
    print("sync, 1 caller: p50 %.1f us, p99 %.1f us, %d calls" % (lat[n // 2] * 1e6, lat[n * 99 // 100] * 1e6, n))

    per = n // 8
    t0 = time.perf_counter()
    ts = [threading.Thread(target=lambda: [c.allow("bench", "t%d" % (i % 1000)) for i in range(per)]) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    el = time.perf_counter() - t0
    st = c.stats()
    print("sync, 8 threads: %.0f decisions/s (failed open: %d)" % (per * 8 / el, st.failed_open))
    c.close()

    async def amain():
        ac = await AsyncClient.create(socket_path=path, timeout=1.0)
        per = n // 64

        async def task(j):
            for i in range(per):
                await ac.allow("bench", "a%d" % ((i + j) % 1000))
        t0 = time.perf_counter()
        await asyncio.gather(*(task(j) for j in range(64)))
        el = time.perf_counter() - t0
        print("asyncio, 64 tasks: %.0f decisions/s (failed open: %d)" % (per * 64 / el, ac.stats().failed_open))
        await ac.close()
    asyncio.run(amain())


if __name__ == "__main__":
    main()
