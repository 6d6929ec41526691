"""Stand-ins for the outside world, served by ``elicitd dev`` (``make run``) and nothing else.

``Dev ID`` is an OpenID Connect issuer with a sign-in page where you pick or type a user name, and
``Demo Files`` is an OAuth 2 provider with a consent screen, refresh tokens and a tiny files API.
Both speak the real protocols (discovery, JWKS, authorization code with PKCE S256, RFC 9207
``iss``), and elicitd reaches them over HTTP exactly as it reaches any issuer or provider: a
newcomer sees the whole connect story on a laptop without registering an app anywhere.

Only ``service.cli``'s ``dev`` command imports this package, and only after checking that the
instance runs on embedded backends on loopback (:func:`refusal`): the production app, ``serve``
and every other command never load it.
"""

from __future__ import annotations

from service.devtools.mount import DevTools, prepare_dev_tools, refusal

__all__ = ["DevTools", "prepare_dev_tools", "refusal"]
