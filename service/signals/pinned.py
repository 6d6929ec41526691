"""An HTTP transport that connects only where the address rule allows, to the address it checked.

Checking a webhook's host when it is registered is not enough: the name's DNS answer can change to
a private address afterwards (DNS rebinding), and an HTTP client that resolves the name again when
it connects would go wherever that second answer points. So the resolution happens here, inside
the connection pool's network backend: the host is resolved once, every address is judged by
``service.destinations``, and the socket is opened to an address that passed — the HTTP client
never resolves the name itself.

The pool stays keyed by the URL's own origin (scheme, *host name*, port), so TLS is set up exactly
as for any https URL: SNI carries the name and the certificate is verified against the name. That
is why this is a transport rather than "connect to the IP with a ``Host`` header and an
``sni_hostname`` extension": a pool keyed by IP would hand a connection verified for
``a.example`` to a request for ``b.example`` that resolved to the same address, and the second
name's certificate would never be checked.

A refused destination raises ``DestinationRefused`` (an ``httpx.ConnectError``) whose ``reason``
names the address and its kind — never the URL, whose path may be a secret.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import typing
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

import httpcore
import httpx

from service.destinations import IPAddress, IPNetwork, address_problem


class Resolver(Protocol):
    """Host name to addresses, in the order to try them."""

    async def resolve(self, host: str, port: int) -> list[IPAddress]: ...


class SystemResolver:
    """The operating system's resolver (``getaddrinfo``), run off the event loop by asyncio."""

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        found: list[IPAddress] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = ipaddress.ip_address(sockaddr[0])
            if address not in found:
                found.append(address)
        return found


class DestinationRefused(httpx.ConnectError):
    """The host resolved only to addresses the rule refuses; ``reason`` says why, in words."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"destination refused: {reason}")
        self.reason = reason


class _Refused(httpcore.ConnectError):
    """Inside httpcore; turned into ``DestinationRefused`` at the transport's edge."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, allowed: tuple[IPNetwork, ...], resolver: Resolver) -> None:
        self._allowed = allowed
        self._resolver = resolver
        self._inner = httpcore.AnyIOBackend()

    async def _addresses(self, host: str, port: int, timeout: float | None) -> list[IPAddress]:
        try:
            return [ipaddress.ip_address(host)]  # a literal address needs no resolver
        except ValueError:
            pass
        try:
            async with asyncio.timeout(timeout):
                return await self._resolver.resolve(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout("name resolution timed out") from None
        except OSError:  # socket.gaierror: no such name, or no answer
            raise httpcore.ConnectError("name not resolved") from None

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self._addresses(host, port, timeout)
        problems = [address_problem(address, self._allowed) for address in addresses]
        usable = [address for address, problem in zip(addresses, problems, strict=True) if problem is None]
        if not usable:
            raise _Refused(next((p for p in problems if p is not None), "the host has no address"))
        last: Exception | None = None
        for address in usable:  # the checked addresses in the resolver's order, as a browser tries them
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None  # usable is not empty, so the loop ran and failed
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise _Refused("a Unix socket is never a webhook destination")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@contextmanager
def _httpx_errors() -> Iterator[None]:
    """httpcore's exceptions as httpx's classes of the same name, as httpx's own transport does."""
    try:
        yield
    except _Refused as exc:
        raise DestinationRefused(exc.reason) from None
    except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError, httpcore.ProxyError) as exc:
        mapped: type[httpx.TransportError] = getattr(httpx, type(exc).__name__, httpx.TransportError)
        raise mapped(str(exc)) from None
    except httpcore.UnsupportedProtocol as exc:
        raise httpx.UnsupportedProtocol(str(exc)) from None


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: typing.AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            with _httpx_errors():
                await close()


class PinnedTransport(httpx.AsyncBaseTransport):
    """For ``httpx.AsyncClient(transport=...)``: HTTP/1.1, TLS verified by ``verify`` (the system
    trust store unless given a context), no proxy — a proxy would resolve the name itself."""

    def __init__(
        self,
        allowed: Iterable[IPNetwork] = (),
        *,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits | None = None,
    ) -> None:
        limits = limits or httpx.Limits()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_PinnedBackend(tuple(allowed), resolver or SystemResolver()),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)  # an AsyncClient's request
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _httpx_errors():
            answer = await self._pool.handle_async_request(core)
        assert isinstance(answer.stream, typing.AsyncIterable)  # httpcore's async pool
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream),
            extensions=answer.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
