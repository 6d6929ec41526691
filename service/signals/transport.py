"""How wake-ups travel between processes: one Redis server, or a Redis Cluster.

The waiter hub (``service.signals.bus``) decides when it is healthy, when it polls and when it
reconnects; a transport only carries ids. ``subscribe`` returns once every subscription it needs
is confirmed by Redis; the subscription's ``receive`` then delivers payloads until a connection
fails or a node stops answering its heartbeat, and raises. ``publish`` sends one batch or raises.

* ``SingleRedis``: one ``SUBSCRIBE`` connection on the channel; ``PUBLISH`` written on a
  connection of its own by the announcing call itself (``DirectPublisher``), or, while that
  connection is being made, in batches from the hub's publishing task.
* ``ClusterRedis``: a fixed set of shard channels, ``<channel>:{<tag>}``, whose hash tags are
  chosen so shard *i* lands on the first slot of the *i*-th of equal slot ranges, spreading the
  shards over the masters however the slots were split. An id goes to the shard its random bits
  pick. The subscription holds one ``SSUBSCRIBE`` connection per master that owns shards (its
  channels all ride on it), each with its own heartbeat; any one failing fails the whole
  subscription, and the next ``subscribe`` reads the topology afresh (after a failover, the
  promoted replica). redis-py's ``ClusterPubSub`` would re-route shard channels by itself behind
  the hub's back; here a lost node is a lost subscription, which the hub answers by polling and
  waking every waiter, as with one Redis.

A message carries one or more ids, hex, separated by single spaces (at most ``IDS_PER_MESSAGE``):
a single completion is one message of one id, as before; a sweep's batch of 500 expiries is five
messages instead of 500, which every process would otherwise parse one by one (a burst of 100,000
expiries cost each replica ~15 s of event loop in redis-py's reader).

Redis holds no keys for elicitd (flow-creation limits are counted in PostgreSQL), so the shard
channels are the only thing that needs slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import RedisClusterException, RedisError

from service.settings import ClusterAddress
from service.signals.direct import (
    CONNECT_TIMEOUT_SECONDS,
    HEARTBEAT,
    PUBLISH_TIMEOUT_SECONDS,
    Deliver,
    DirectPublisher,
    DirectSubscription,
    RedisSilent,
    bounded,
    connection_maker,
    messages,
)

SUBSCRIBER_NAME = "elicitd-wakeups"
# A UUIDv7 starts with a millisecond timestamp; its last 62 bits are random (as a UUIDv4's are).
_RANDOM_BITS = (1 << 62) - 1


class ShardMoved(RedisError):
    """A master dropped a shard subscription (Redis does so when the channel's slot moves to
    another master): the subscription no longer covers every shard."""


class ClusterUnavailable(RedisError):
    """The cluster could not say, or could not serve, who owns a shard channel (no node answered,
    a slot is uncovered). redis-py's own ``RedisClusterException`` is no ``RedisError``: this one
    is, so the hub treats it as any other Redis failure."""


class Subscription(Protocol):
    async def receive(self, deliver: Deliver) -> None:
        """Hand each message's payload to ``deliver`` until something fails (it raises)."""

    async def aclose(self) -> None: ...


class Transport(Protocol):
    async def subscribe(self) -> Subscription:
        """Subscribed once Redis confirmed every subscription; raises RedisError/OSError."""

    def send(self, ids: Sequence[uuid.UUID]) -> asyncio.Future[None] | None:
        """Write the batch now, from the calling code, and return a future settled by Redis's
        answer (bounded by ``PUBLISH_TIMEOUT_SECONDS`` itself); None when the transport cannot
        write at once (no connection yet, or a cluster): then ``publish`` from a task."""

    async def publish(self, ids: Sequence[uuid.UUID]) -> None:
        """Send one batch within ``PUBLISH_TIMEOUT_SECONDS`` (the caller bounds it) or raise."""

    async def aclose(self) -> None: ...


def transport_for(
    url: str, *, channel: str, shards: int, heartbeat: float, pong_timeout: float
) -> SingleRedis | ClusterRedis:
    """A cluster transport for a ``redis+cluster://`` URL, the single-server one otherwise."""
    address = ClusterAddress.parse(url)
    if address is None:
        return SingleRedis(url, channel=channel, heartbeat=heartbeat, pong_timeout=pong_timeout)
    return ClusterRedis(address, channel=channel, shards=shards, heartbeat=heartbeat, pong_timeout=pong_timeout)


async def _confirm(pubsub: PubSub, kind: str, count: int) -> None:
    """Subscribed only once Redis confirmed it: a connection accepted by a paused Redis's
    kernel is not a subscription."""
    confirmed = 0
    async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
        while confirmed < count:
            message = await pubsub.get_message(timeout=CONNECT_TIMEOUT_SECONDS)
            if message is not None and message["type"] == kind:
                confirmed += 1


async def _receive(pubsub: PubSub, kind: str, deliver: Deliver, heartbeat: float, pong_timeout: float) -> None:
    """Dispatch messages until the connection fails or Redis stops answering.

    Any message shows Redis is there; after ``heartbeat`` seconds without one, a PING must be
    answered within ``pong_timeout`` (the PONG arrives on the subscription, behind anything
    published before it)."""
    while True:
        message = await pubsub.get_message(timeout=heartbeat)
        if message is None:
            await pubsub.ping(HEARTBEAT)
            try:
                async with asyncio.timeout(pong_timeout):
                    while message is None or message["type"] != "pong":
                        message = await pubsub.get_message(timeout=pong_timeout)
                        if message is not None:
                            _handle(message, kind, deliver)
            except TimeoutError:
                raise RedisSilent from None
            continue
        _handle(message, kind, deliver)


def _handle(message: dict[str, Any], kind: str, deliver: Deliver) -> None:
    if message["type"] == kind:
        deliver(message.get("data"))
    elif message["type"] == "sunsubscribe":  # never ours: elicitd does not unsubscribe
        raise ShardMoved


async def _close(pubsub: PubSub, client: aioredis.Redis) -> None:
    with contextlib.suppress(Exception):
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    await client.aclose()


@contextlib.asynccontextmanager
async def _closed_on_failure(subscription: Subscription) -> AsyncIterator[None]:
    """Close a subscription being made if making it fails or is cancelled (bounded: the node may
    be the one that is gone)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(subscription.aclose(), timeout=CONNECT_TIMEOUT_SECONDS)
        raise


class _NodeSubscription:
    """One subscribed connection (to the single Redis, or to one cluster master)."""

    def __init__(self, client: aioredis.Redis, kind: str, heartbeat: float, pong_timeout: float) -> None:
        self.client = client
        self.pubsub = client.pubsub()
        self.kind = kind
        self.heartbeat = heartbeat
        self.pong_timeout = pong_timeout

    async def receive(self, deliver: Deliver) -> None:
        await _receive(self.pubsub, self.kind, deliver, self.heartbeat, self.pong_timeout)

    async def aclose(self) -> None:
        await _close(self.pubsub, self.client)


class SingleRedis:
    """One Redis server: ``SUBSCRIBE``/``PUBLISH`` on one channel, on connections spoken to
    directly (``service.signals.direct``)."""

    def __init__(self, url: str, *, channel: str, heartbeat: float, pong_timeout: float) -> None:
        self.url = url
        self.channel = channel
        self.heartbeat = heartbeat
        self.pong_timeout = pong_timeout
        self._make = connection_maker(url)
        self._publisher = DirectPublisher(url, channel=channel)

    async def subscribe(self) -> DirectSubscription:
        async with asyncio.timeout(2 * CONNECT_TIMEOUT_SECONDS):  # the connection, then the confirmation
            subscription = await DirectSubscription.open(
                self._make, self.channel, heartbeat=self.heartbeat, pong_timeout=self.pong_timeout
            )
        # Redis answers (again): have the publishing connection ready before the first wake-up,
        # which would otherwise wait for the publishing task to make it.
        with contextlib.suppress(RedisError, OSError):
            await self._publisher.connect()
        return subscription

    def send(self, ids: Sequence[uuid.UUID]) -> asyncio.Future[None] | None:
        return self._publisher.send(ids)

    async def publish(self, ids: Sequence[uuid.UUID]) -> None:
        await self._publisher.publish(ids)

    async def aclose(self) -> None:
        await self._publisher.aclose()


@functools.lru_cache(maxsize=8)
def shard_channels(channel: str, shards: int) -> tuple[str, ...]:
    """``<channel>:{<tag>}`` for each shard; shard *i*'s tag is the smallest number whose slot is
    the first of the *i*-th of ``shards`` equal slot ranges, so shards spread evenly over slots.

    Every process derives the same names from the same settings (it is pure arithmetic)."""
    wanted = {i * REDIS_CLUSTER_HASH_SLOTS // shards: i for i in range(shards)}
    tags: dict[int, int] = {}
    number = 0
    while len(tags) < len(wanted):
        slot = key_slot(str(number).encode())
        if slot in wanted and wanted[slot] not in tags:
            tags[wanted[slot]] = number
        number += 1
    return tuple(f"{channel}:{{{tags[i]}}}" for i in range(shards))


def shard_of(flow_id: uuid.UUID, shards: int) -> int:
    """The shard an id is published on: from its random bits, not a UUIDv7's clock."""
    return (flow_id.int & _RANDOM_BITS) % shards


class _ClusterSubscription:
    """One ``SSUBSCRIBE`` connection per master that owns shard channels, received from together:
    the first to fail (or go silent) ends them all."""

    def __init__(self, nodes: list[_NodeSubscription]) -> None:
        self.nodes = nodes

    async def receive(self, deliver: Deliver) -> None:
        tasks = [asyncio.create_task(node.receive(deliver)) for node in self.nodes]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        await asyncio.gather(*(node.aclose() for node in self.nodes), return_exceptions=True)


class ClusterRedis:
    """A Redis Cluster: ``SSUBSCRIBE``/``SPUBLISH`` on hash-tagged shard channels."""

    def __init__(
        self, address: ClusterAddress, *, channel: str, shards: int, heartbeat: float, pong_timeout: float
    ) -> None:
        self.address = address
        self.channels = shard_channels(channel, shards)
        self.heartbeat = heartbeat
        self.pong_timeout = pong_timeout
        self._publisher: RedisCluster | None = None
        self._closing: set[asyncio.Task[None]] = set()
        # The owners the last subscription found; a change means the publisher's map is stale.
        self._owners: dict[str, list[str]] = {}

    def _credentials(self) -> dict[str, Any]:
        return {"username": self.address.username, "password": self.address.password, "ssl": self.address.tls}

    def _cluster(self, socket_timeout: float) -> RedisCluster:
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in self.address.nodes],
            **self._credentials(),
            **bounded(socket_timeout),
        )

    async def owners(self) -> tuple[dict[str, list[str]], RedisCluster]:
        """Which master (``host:port``) owns each shard channel, as the cluster says now, and the
        client that asked (it knows the topology; the publisher may keep it)."""
        cluster = self._cluster(CONNECT_TIMEOUT_SECONDS)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                await cluster.initialize()
            owners: dict[str, list[str]] = {}
            for channel in self.channels:
                node = cluster.get_node_from_key(channel)
                if node is None:
                    raise ClusterUnavailable("a shard channel's slot has no master")
                owners.setdefault(node.name, []).append(channel)
        except BaseException as exc:
            await _close_cluster(cluster)
            if isinstance(exc, RedisClusterException):
                raise ClusterUnavailable(type(exc).__name__) from exc
            raise
        return owners, cluster

    async def subscribe(self) -> _ClusterSubscription:
        owners, cluster = await self.owners()
        if owners != self._owners or self._publisher is None:
            # The publisher starts from this topology: reading it inside a batch's 0.5 s would
            # drop the first batches on a busy machine, and after a failover it must be fresh.
            self._owners = owners
            self._drop_publisher()
            self._publisher = cluster
        else:
            await _close_cluster(cluster)
        subscription = _ClusterSubscription([])
        async with _closed_on_failure(subscription), asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
            for name, channels in owners.items():
                host, _, port = name.rpartition(":")
                client = aioredis.Redis(
                    host=host,
                    port=int(port),
                    # Named, so CLIENT LIST on a master shows whose subscription a connection is.
                    client_name=SUBSCRIBER_NAME,
                    **self._credentials(),
                    **bounded(CONNECT_TIMEOUT_SECONDS),
                )
                node = _NodeSubscription(client, "smessage", self.heartbeat, self.pong_timeout)
                subscription.nodes.append(node)
                # One SSUBSCRIBE per channel: a node refuses one naming channels of two slots.
                for channel in channels:
                    await node.pubsub.ssubscribe(channel)
            await asyncio.gather(
                *(
                    _confirm(node.pubsub, "ssubscribe", len(channels))
                    for node, channels in zip(subscription.nodes, owners.values(), strict=True)
                )
            )
        return subscription

    def send(self, ids: Sequence[uuid.UUID]) -> asyncio.Future[None] | None:
        return None  # a cluster's publish routes by slot through redis-py: always from the task

    async def publish(self, ids: Sequence[uuid.UUID]) -> None:
        if self._publisher is None:
            self._publisher = self._cluster(PUBLISH_TIMEOUT_SECONDS)
        try:
            by_shard: dict[int, list[uuid.UUID]] = {}
            for flow_id in ids:
                by_shard.setdefault(shard_of(flow_id, len(self.channels)), []).append(flow_id)
            async with self._publisher.pipeline(transaction=False) as pipe:
                for shard, shard_ids in by_shard.items():
                    for payload in messages(shard_ids):
                        pipe.spublish(self.channels[shard], payload)
                await pipe.execute()
        except RedisClusterException as exc:
            self._drop_publisher()
            raise ClusterUnavailable(type(exc).__name__) from exc
        except BaseException:
            # Perhaps a master failed over: the next batch starts from a fresh topology.
            self._drop_publisher()
            raise

    def _drop_publisher(self) -> None:
        """Forget the publisher now; close it in the background, so a failed batch is not held up
        (past its own bound) by closing connections to a node that is gone."""
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            task = asyncio.get_running_loop().create_task(_close_cluster(publisher))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        self._drop_publisher()
        await asyncio.gather(*self._closing, return_exceptions=True)


async def _close_cluster(cluster: RedisCluster) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(cluster.aclose(), timeout=CONNECT_TIMEOUT_SECONDS)
