"""The shared token bucket on Redis: a hash per (service base URL, endpoint group), updated by
a small Lua script (EVALSHA; loaded again by redis-py if the server lost it).

The script runs atomically on the server and uses the server's clock (`TIME`), so clocks of
the hosts taking part never matter. A bucket idle for longer than its key's time to live is
forgotten and starts again full (one block), which is what a refill would have given it.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.exceptions import RedisError

from engage_sync.deliver.budget_store import STORE_DEADLINE, guarded

PREFIX = "engage-sync:rate:"
_TIMEOUT_S = 5  # socket timeouts: a lost store is reported, not waited for
_TTL_MS = 600_000  # longer than any pause after a 429 (at most 300 s) plus a refill

# KEYS[1] the bucket; ARGV: mode ('take' | 'drain'), n or seconds, rate, capacity, ttl (ms).
# Returns {tokens granted, tokens left as text} (Lua numbers would be cut to integers).
_SCRIPT = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) + tonumber(now_parts[2]) / 1000000
local rate, cap = tonumber(ARGV[3]), tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
local tokens = tonumber(state[1]) or cap
local stamp = tonumber(state[2]) or now
local avail = math.min(cap, tokens + rate * math.max(0, now - stamp))
local granted = 0
if ARGV[1] == 'take' then
  granted = math.min(tonumber(ARGV[2]), math.floor(avail))
  if granted < 1 then granted = 0 end
  avail = avail - granted
else
  avail = math.min(avail, -rate * tonumber(ARGV[2]))
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', avail),
           'stamp', string.format('%.6f', now))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {granted, string.format('%.6f', avail)}
"""


class RedisTokenStore:
    """`TokenStore` on a Redis server (`redis://`, `rediss://` or `unix://` URL)."""

    backend = "redis"

    def __init__(self, url: str, shown: str, deadline: float = STORE_DEADLINE) -> None:
        self.url = shown  # the URL as messages name it, its password hidden (by the opener)
        self.deadline = deadline  # seconds a call waits for the store to come back
        self._client: Any = redis.Redis.from_url(
            url, socket_timeout=_TIMEOUT_S, socket_connect_timeout=_TIMEOUT_S)
        self._script = self._client.register_script(_SCRIPT)

    def __repr__(self) -> str:
        return f"RedisTokenStore({self.url})"

    def take(self, key: str, n: int, rate: float, capacity: float) -> tuple[int, float]:
        granted, tokens = self._run("take", key, n, rate, capacity)
        return granted, 0.0 if granted else (1 - tokens) / rate

    def drain(self, key: str, rate: float, capacity: float, seconds: float) -> None:
        self._run("drain", key, seconds, rate, capacity)

    def close(self) -> None:
        self._client.close()

    def _run(self, mode: str, key: str, amount: float, rate: float, capacity: float
             ) -> tuple[int, float]:
        def call() -> tuple[int, float]:
            granted, tokens = self._script(keys=[PREFIX + key],
                                           args=[mode, amount, rate, capacity, _TTL_MS])
            return int(granted), float(tokens)

        return guarded(self, (RedisError, OSError), call, deadline=self.deadline)
