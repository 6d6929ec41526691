"""Wake-ups over a real Redis Cluster (3 masters, 3 replicas; ``tests/support/redis_cluster.py``).

Two instances, ``a`` and ``b``, share the cluster and one database. Requests park on one and flows
are completed on the other, so only Redis (or polling) can wake them. The module's cluster is
shared: the tests run in file order, the failover test kills one master (its replica takes over)
and the last one stops every node.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from service.db.base import FLOW_ID
from service.errors import ConfigurationError
from service.flows.schemas import Subject
from service.settings import ClusterAddress, KeyRing, Settings
from service.signals.bus import WaiterHub
from service.signals.transport import SUBSCRIBER_NAME, shard_channels, shard_of
from tests.flows.helpers import external_body
from tests.support.apps import RunningApp, new_server_client, running_app
from tests.support.redis_cluster import Node, RedisCluster, redis_cluster
from tests.support.waiting import parked, until

ROOT = Path(__file__).resolve().parents[2]
SHARDS = 8
# Far below any poll interval used here: only a Redis wake-up answers this fast.
FAST = 0.5
# What b hears of one completion on a: the flow's id, and its server client's (for its event tails).
MESSAGES = 2
LONG_POLL = 30.0  # so long that no poll tick can explain a wake-up in the first tests
POLL = 1.0  # the failover tests: polling must answer within it (plus a query)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    with redis_cluster(ROOT / ".data" / "test" / f"cluster-{uuid.uuid4().hex[:8]}") as running:
        yield running


@dataclass
class Pair:
    a: RunningApp
    b: RunningApp
    http_a: httpx.AsyncClient
    http_b: httpx.AsyncClient

    def hubs(self) -> list[WaiterHub]:
        return [self.a.state.hub, self.b.state.hub]

    def on_redis(self) -> bool:
        return all(hub.healthy for hub in self.hubs())

    async def flows_on_every_shard(self) -> dict[int, str]:
        """One new flow per shard: created until their ids' random bits have hit every shard."""
        found: dict[int, str] = {}
        while len(found) < SHARDS:
            tag = uuid.uuid4().hex
            answers = await asyncio.gather(
                *(
                    self.http_a.post(
                        "/v1/flows",
                        json=external_body(Subject(iss="https://id.example.com", sub=f"{tag}-{i}")),
                    )
                    for i in range(SHARDS)
                )
            )
            assert [r.status_code for r in answers] == [201] * SHARDS
            for answer in answers:
                ref = answer.json()["flow"]["id"]
                flow_id = FLOW_ID.parse(ref)
                assert flow_id is not None
                found.setdefault(shard_of(flow_id, SHARDS), ref)
        return found

    async def wake(self, flow: str, messages: int = MESSAGES) -> tuple[float, int]:
        """Park a long-poll on ``b``, complete the flow on ``a``: how long after the completion
        ``b`` answered, and how many messages ``b``'s hub received from Redis for it (awaited
        until ``messages`` came: the server client's id may trail the answer)."""
        loop = asyncio.get_running_loop()
        hub = self.b.state.hub
        waiting = asyncio.create_task(self.http_b.get(f"/v1/flows/{flow}", params={"wait_seconds": 25}))
        await parked(self.b, flow)
        received = hub.received
        done = await self.http_a.post(f"/v1/flows/{flow}/complete", json={"result": {"flow": flow}})
        assert done.status_code == 200, done.text
        completed = loop.time()
        response = await asyncio.wait_for(waiting, 30)
        answered = loop.time()
        assert response.json()["flow"]["status"] == "completed"
        await until(lambda: hub.received - received >= messages, what=f"{messages} messages on b")
        return answered - completed, hub.received - received


@asynccontextmanager
async def pair(settings: Settings) -> AsyncIterator[Pair]:
    async with running_app(settings) as a, running_app(settings) as b:
        client = await new_server_client(a)
        async with a.http(client.api_key) as http_a, b.http(client.api_key) as http_b:
            run = Pair(a, b, http_a, http_b)
            await until(run.on_redis, what="both instances subscribed to every shard")
            yield run


async def readiness(http: httpx.AsyncClient) -> tuple[str, str, float]:
    ready = (await http.get("/readyz")).json()
    metrics = (await http.get("/metrics")).text
    fallback = next(
        float(line.split()[1]) for line in metrics.splitlines() if line.startswith("elicitd_redis_fallback ")
    )
    return ready["redis"], ready["wakeups"], fallback


async def subscribers(node: Node) -> list[int]:
    """The shard channel count of each connection subscribed to shard channels on ``node``."""
    async with aioredis.Redis(host="127.0.0.1", port=node.port, socket_timeout=5) as client:
        listed = await client.client_list()
    return sorted(int(c["ssub"]) for c in listed if int(c.get("ssub", 0)) > 0)


async def owned(node: Node, channels: tuple[str, ...]) -> int:
    async with aioredis.Redis(host="127.0.0.1", port=node.port, socket_timeout=5) as client:
        slots = await client.cluster("slots")
    # [[first slot, last slot, [master host, master port, id], replicas …], …]
    ranges = [(entry[0], entry[1]) for entry in slots if int(entry[2][1]) == node.port]
    return sum(any(start <= key_slot(c.encode()) <= end for start, end in ranges) for c in channels)


def cluster_settings(make_settings: Callable[..., Settings], cluster: RedisCluster, poll: float) -> Settings:
    return make_settings(redis_url=cluster.url, redis_shards=SHARDS, poll_interval_seconds=poll)


# ---- configuration --------------------------------------------------------------------------------
KEYS = KeyRing((("k1", b"k" * 32),))
PASSWORD = "hunter2-cluster-secret"


def test_a_cluster_url_is_parsed_and_its_password_never_shown() -> None:
    env = {
        "ELICITD_DATABASE_URL": "postgresql://db.internal/elicitd",
        "ELICITD_REDIS_URL": f"rediss+cluster://app:{PASSWORD}@r1.internal:7000,r2.internal:7001,[fd00::3]:7002/",
        "ELICITD_REDIS_SHARDS": "64",
        "ELICITD_PUBLIC_URL": "https://elicitd.example.com",
    }
    settings = Settings.from_env(env, keys=KEYS)
    assert settings.redis_cluster == ClusterAddress(
        nodes=(("r1.internal", 7000), ("r2.internal", 7001), ("fd00::3", 7002)),
        username="app",
        password=PASSWORD,
        tls=True,
    )
    assert settings.redis_shards == 64
    for shown in (repr(settings), str(settings), repr(settings.redis_cluster)):
        assert PASSWORD not in shown
    assert "redis_url='rediss+cluster://app:***@r1.internal:7000,r2.internal:7001,[fd00::3]:7002/'" in repr(settings)
    assert repr(settings.redis_cluster) == (
        "ClusterAddress(nodes='r1.internal:7000,r2.internal:7001,[fd00::3]:7002', tls=True, password='***')"
    )


def test_a_single_redis_url_is_no_cluster_and_shards_default_to_16() -> None:
    env = {"ELICITD_DATABASE_URL": "postgresql://db/e", "ELICITD_REDIS_URL": "redis://:pw@r:6379/0", "ELICITD_DEV": "1"}
    settings = Settings.from_env(env, keys=KEYS)
    assert settings.redis_cluster is None
    assert settings.redis_shards == 16


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("REDIS_SHARDS", "0", "ELICITD_REDIS_SHARDS must be positive, got 0"),
        ("REDIS_SHARDS", "1025", "ELICITD_REDIS_SHARDS must be between 1 and 1024, got 1025"),
        ("REDIS_SHARDS", "many", "ELICITD_REDIS_SHARDS must be an integer, got 'many'"),
        (
            "REDIS_URL",
            "redis+cluster://r1:7000,r2",
            "ELICITD_REDIS_URL: each cluster node must be host:port (comma-separated), got 'r2'",
        ),
        (
            "REDIS_URL",
            f"redis+cluster://:{PASSWORD}@r1:7000/2",
            "ELICITD_REDIS_URL: a Redis Cluster has only database 0 (end the URL with / or nothing)",
        ),
        (
            "REDIS_URL",
            f"redis+cluster://:{PASSWORD}@r1:7000?ssl=1",
            "ELICITD_REDIS_URL: a redis+cluster:// URL takes no query or fragment",
        ),
        ("REDIS_CHANNEL", "elicitd:{x}", "ELICITD_REDIS_CHANNEL must not contain { or } on a Redis Cluster"),
    ],
)
def test_bad_cluster_settings_name_the_variable(variable: str, value: str, message: str) -> None:
    env = {
        "ELICITD_DATABASE_URL": "postgresql://db/e",
        "ELICITD_REDIS_URL": "redis+cluster://r1:7000",
        "ELICITD_DEV": "1",
        f"ELICITD_{variable}": value,
    }
    with pytest.raises(ConfigurationError) as raised:
        Settings.from_env(env, keys=KEYS)
    assert str(raised.value) == message
    assert PASSWORD not in str(raised.value)


def test_shard_channels_are_hash_tagged_onto_evenly_spread_slots() -> None:
    channels = shard_channels("elicitd:flows", 16)
    assert [key_slot(c.encode()) for c in channels] == [i * 1024 for i in range(16)]
    assert all(c.startswith("elicitd:flows:{") and c.endswith("}") for c in channels)
    # The shard comes from a UUIDv7's random bits: ids made in the same millisecond still spread.
    same_instant = [uuid.UUID(int=(0x0190_0000_0000_7000_8000_0000_0000_0000 | n * 7919)) for n in range(64)]
    assert len({shard_of(i, 16) for i in same_instant}) == 16


async def test_no_password_in_logs_when_the_cluster_cannot_be_reached(caplog: pytest.LogCaptureFixture) -> None:
    from service.embedded import free_port

    async def nothing(ids: list[uuid.UUID]) -> list[uuid.UUID]:
        return []

    hub = WaiterHub(
        redis_url=f"redis+cluster://elicitd:{PASSWORD}@127.0.0.1:{free_port()}",
        channel="elicitd:test",
        poll_interval=0.5,
        safety_poll_interval=30,
        finished=nothing,
    )
    caplog.set_level(logging.DEBUG, logger="elicitd.signals")
    await hub.start()
    try:
        await until(lambda: any("listener error" in r.getMessage() for r in caplog.records), what="a failed attempt")
        assert not hub.healthy
        assert hub.redis_failure is not None and PASSWORD not in hub.redis_failure
    finally:
        await hub.stop()
    assert caplog.records
    for record in caplog.records:
        assert PASSWORD not in record.getMessage()
        assert PASSWORD not in repr(record.__dict__)


# ---- on the cluster -------------------------------------------------------------------------------
async def test_wakeups_cross_instances_on_every_shard(
    cluster: RedisCluster, make_settings: Callable[..., Settings]
) -> None:
    async with pair(cluster_settings(make_settings, cluster, LONG_POLL)) as run:
        flows = await run.flows_on_every_shard()
        woken = [await run.wake(flows[shard]) for shard in range(SHARDS)]
    latencies = [latency for latency, _ in woken]
    print(f"wake-ups over the cluster: max {max(latencies) * 1000:.0f} ms, {sorted(latencies)}")
    # Each waiter on b heard its own flow's shard message, and quickly: the poll interval is 30 s.
    assert [received for _, received in woken] == [MESSAGES] * SHARDS
    assert max(latencies) < FAST


async def test_one_subscription_connection_per_master_per_process(
    cluster: RedisCluster, make_settings: Callable[..., Settings]
) -> None:
    channels = shard_channels(make_settings().redis_channel, SHARDS)
    masters = cluster.masters()
    assert len(masters) == 3
    async with pair(cluster_settings(make_settings, cluster, LONG_POLL)):
        # Two instances: on each master, two connections, each holding every shard channel there.
        seen = {m.port: await subscribers(m) for m in masters}
        expected = {m.port: [await owned(m, channels)] * 2 for m in masters}
        assert seen == expected
        assert sum(counts[0] for counts in seen.values()) == SHARDS
        assert all(counts[0] > 0 for counts in seen.values())
        async with aioredis.Redis(host="127.0.0.1", port=masters[0].port) as client:
            names = {c["name"] for c in await client.client_list() if int(c.get("ssub", 0)) > 0}
        assert names == {SUBSCRIBER_NAME}
        for replica in (n for n in cluster.nodes if n not in masters):
            assert await subscribers(replica) == []


async def test_a_master_failover_is_polled_through_then_back_on_redis(
    cluster: RedisCluster, make_settings: Callable[..., Settings]
) -> None:
    channels = shard_channels(make_settings().redis_channel, SHARDS)
    async with pair(cluster_settings(make_settings, cluster, POLL)) as run:
        flows = await run.flows_on_every_shard()
        pending = iter(flows.values())
        latency, received = await run.wake(next(pending))
        assert (received, latency < FAST) == (MESSAGES, True)

        victim = cluster.masters()[0]
        assert await owned(victim, channels) > 0
        heir = cluster.replica_of(victim)
        killed = time.monotonic()
        victim.kill()
        await until(lambda: not any(hub.healthy for hub in run.hubs()), timeout=5, what="the lost master noticed")
        noticed = time.monotonic() - killed
        assert await readiness(run.http_a) == ("down", "polling", 1.0)
        assert await readiness(run.http_b) == ("down", "polling", 1.0)

        # Meanwhile completions still reach waiters elsewhere, by polling PostgreSQL.
        latency, received = await run.wake(next(pending), messages=0)
        assert received == 0
        assert latency < POLL + FAST

        await until(run.on_redis, timeout=20, what="both instances subscribed to the new topology")
        polling = time.monotonic() - killed
        assert cluster.roles()[heir.port] == "master"
        assert await readiness(run.http_a) == ("ok", "redis", 0.0)
        assert await readiness(run.http_b) == ("ok", "redis", 0.0)
        assert await subscribers(heir) == [await owned(heir, channels)] * 2

        woken = [await run.wake(flow) for flow in pending]
    print(f"failover: noticed in {noticed:.2f} s, on polling for {polling:.2f} s")
    assert [received for _, received in woken] == [MESSAGES] * len(woken)
    assert max(latency for latency, _ in woken) < FAST


async def test_with_the_whole_cluster_stopped_waits_finish_by_polling(
    cluster: RedisCluster, make_settings: Callable[..., Settings]
) -> None:
    await until(cluster.ready, timeout=20, what="a cluster with every slot served")
    async with pair(cluster_settings(make_settings, cluster, POLL)) as run:
        flows = await run.flows_on_every_shard()
        for node in cluster.nodes:
            node.kill()
        await until(lambda: not any(hub.healthy for hub in run.hubs()), timeout=5, what="the cluster's loss noticed")
        assert await readiness(run.http_b) == ("down", "polling", 1.0)
        ready = (await run.http_b.get("/readyz")).json()
        assert (ready["status"], ready["postgres"]) == ("ready", "ok")
        woken = [await run.wake(flows[shard], messages=0) for shard in (0, SHARDS - 1)]
    assert [received for _, received in woken] == [0, 0]
    assert max(latency for latency, _ in woken) < POLL + FAST
