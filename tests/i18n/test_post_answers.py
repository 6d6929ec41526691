"""Pages that answer a form POST offer their language links too: a POST's own address cannot be
opened again by a link, so each links to the page that shows the same thing by GET — the flow's
page when the form posted about a flow, the person's own page after a form on it — and the link
works there. Only the answer to a sign-out has none (docs/configuration.md#languages)."""

from __future__ import annotations

import re

from tests.support.apps import RunningApp

FLOW = "fl_" + "ab" * 16


def _links(html: str) -> list[str]:
    nav = re.search(r'<nav class="languages"[^>]*>(.*?)</nav>', html, re.S)
    return [] if nav is None else re.findall(r'href="([^"]+)"', nav.group(1))


async def test_post_answers_link_to_the_page_that_reopens_them(elicitd: RunningApp) -> None:
    async with elicitd.http() as http:
        # An unknown flow, no session, no CSRF token: each form is refused with a page.
        connect = await http.post(f"/connect/{FLOW}/continue", data={"csrf_token": "x"})
        grant = await http.post(f"/f/{FLOW}/grant", data={"csrf_token": "x"})
        revoke = await http.post("/me/grants/gr_0/revoke", data={"csrf_token": "x"})
        logout = await http.post("/auth/logout", data={"csrf_token": "x"})
        followed = [await http.get(link) for link in (_links(connect.text)[1], _links(revoke.text)[-1])]
    assert (connect.status_code, grant.status_code, revoke.status_code, logout.status_code) == (404, 404, 401, 403)
    for answer in (connect, grant):
        assert _links(answer.text) == [
            f"/f/{FLOW}?lang={tag}" for tag in ("en", "th", "ja", "zh-Hans", "es", "de", "fr", "pt-BR", "ar")
        ]
    assert _links(revoke.text)[::8] == ["/me?lang=en", "/me?lang=ar"]
    assert _links(logout.text) == []
    # The links work: the flow's page (here: no such flow, in Thai) and the own page (in Arabic).
    assert [r.status_code for r in followed] == [404, 200]
    assert '<html lang="th" dir="ltr">' in followed[0].text
    assert '<html lang="ar" dir="rtl">' in followed[1].text
