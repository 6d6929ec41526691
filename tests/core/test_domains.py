"""Homograph-safe domains on pages: a host with non-ASCII letters is shown in its Unicode form with
its ASCII (punycode) form beside it — elicitd's own origin and an ``external`` flow's page alike."""

from __future__ import annotations

import html
from collections.abc import Callable

from service.domains import display_host, display_origin, display_url_host, host_forms
from service.settings import Settings
from tests.admin.conftest import subject_body
from tests.support.apps import new_server_client, running_app

# "apple.example" with a Cyrillic a (U+0430) and "apple.com" written entirely in Cyrillic letters.
LOOKALIKE = "xn--pple-43d.example"
LOOKALIKE_UNICODE = "\u0430pple.example"
ALL_CYRILLIC = "xn--80ak6aa92e.com"
ALL_CYRILLIC_UNICODE = "\u0430\u0440\u0440\u04cf\u0435.com"


def test_ascii_and_unicode_forms() -> None:
    assert host_forms(LOOKALIKE) == (LOOKALIKE, LOOKALIKE_UNICODE)
    assert host_forms(LOOKALIKE_UNICODE) == (LOOKALIKE, LOOKALIKE_UNICODE)
    assert display_host(LOOKALIKE) == f"{LOOKALIKE_UNICODE} ({LOOKALIKE})"
    assert display_host("Example.COM") == "example.com"
    assert display_host("127.0.0.1") == "127.0.0.1"
    assert display_host("xn--zz.example") == "xn--zz.example"  # not valid punycode: shown as it is
    assert display_url_host(f"https://{ALL_CYRILLIC}/step?x=1") == f"{ALL_CYRILLIC_UNICODE} ({ALL_CYRILLIC})"
    assert display_origin(f"https://{LOOKALIKE}:8443/base") == f"https://{LOOKALIKE_UNICODE}:8443 ({LOOKALIKE})"
    assert display_origin("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


async def test_pages_show_both_forms_of_a_look_alike_domain(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(public_url=f"https://{LOOKALIKE}")
    async with running_app(settings, keep_public_url=True) as app:
        client = await new_server_client(app)
        async with app.http(client.api_key) as http:
            created = await http.post(
                "/v1/flows",
                json={"subject": subject_body(), "kind": "external", "url": f"https://{ALL_CYRILLIC}/step"},
            )
            assert created.status_code == 201, created.text
            page = await http.get(f"/f/{created.json()['flow']['id']}", headers={"Authorization": ""})
    assert page.status_code == 200
    body = html.unescape(page.text)
    # elicitd's own origin, in the header and the footer.
    assert body.count(f"https://{LOOKALIKE_UNICODE} ({LOOKALIKE})") == 2
    # Where the external step continues, before the person follows the link.
    assert f"It continues at <code>{ALL_CYRILLIC_UNICODE} ({ALL_CYRILLIC})</code>" in body
    assert f'href="https://{ALL_CYRILLIC}/step"' in body
