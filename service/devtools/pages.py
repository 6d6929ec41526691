"""The pages of Dev ID (sign-in) and Demo Files (consent), with their own look.

Each stand-in looks unlike elicitd on purpose, so a person (and a screenshot) can tell when the
browser has left elicitd for the identity provider or the third-party service, as it would with
real ones. Templates are strings rendered with Jinja's autoescaping; the styles are inline, so
nothing is fetched from anywhere.
"""

from __future__ import annotations

from typing import Any

from jinja2 import DictLoader, Environment, select_autoescape
from litestar import Response

_BASE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }} · {{ brand }}</title>
<style>
:root { --accent: {{ accent }}; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       background: {{ background }}; }
.top { display: flex; justify-content: space-between; align-items: center; padding: .8rem 1.2rem;
       background: var(--accent); color: #fff; }
.brand { font-weight: 700; font-size: 1.1rem; letter-spacing: .02em; }
.tag { font-size: .8rem; border: 1px solid rgba(255,255,255,.7); border-radius: 1rem; padding: .1rem .6rem; }
main { max-width: {{ width | default("30rem") }}; margin: 2rem auto; padding: 1.5rem; background: #fff;
       border-radius: .9rem; box-shadow: 0 2px 8px rgba(0,0,0,.12); }
h1 { font-size: 1.35rem; margin: 0 0 .5rem; }
.muted { color: #5f6368; font-size: .9rem; }
.users { display: flex; gap: .6rem; flex-wrap: wrap; margin: .8rem 0 1.2rem; }
button { font: inherit; padding: .6rem 1.1rem; border-radius: .5rem; border: 1px solid var(--accent);
         background: var(--accent); color: #fff; cursor: pointer; }
button.user { background: #fff; color: var(--accent); min-width: 6rem; }
button.user::before { content: attr(data-initial); display: inline-block; width: 1.6rem; height: 1.6rem;
         margin-right: .5rem; border-radius: 50%; background: var(--accent); color: #fff; line-height: 1.6rem;
         text-align: center; font-weight: 700; }
button.secondary { background: #fff; color: var(--accent); }
button:focus-visible, input:focus-visible { outline: 3px solid #f9a825; outline-offset: 2px; }
label { display: block; font-weight: 600; margin-top: .8rem; }
input[type=text] { font: inherit; padding: .5rem; border: 1px solid #999; border-radius: .4rem; width: 100%; }
.row { display: flex; gap: .6rem; align-items: end; }
.row input { flex: 1; }
.actions { display: flex; gap: .75rem; margin-top: 1.2rem; }
ul.scopes { padding-left: 1.2rem; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .35rem .9rem; margin: 1rem 0; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; }
pre { background: #f4f4f6; padding: .6rem; border-radius: .4rem; white-space: pre-wrap; font-size: .8rem; }
a { color: var(--accent); }
.app { font-weight: 700; }
.error { color: #b3261e; }
code { font-family: ui-monospace, monospace; font-size: .85rem; word-break: break-all; }
footer { max-width: {{ width | default("30rem") }}; margin: 0 auto 2rem; padding: 0 1rem; font-size: .8rem;
         color: #5f6368; text-align: center; }
</style>
</head>
<body>
<header class="top"><span class="brand">{{ brand }}</span>
<span class="tag">{{ tag | default("development stand-in") }}</span></header>
<main>
{% block content %}{% endblock %}
</main>
<footer>{% if kind %}{{ brand }} is served by <code>elicitd dev</code> for trying elicitd on this machine. It is not a
real {{ kind }}{% if note %}: {{ note }}{% endif %}.{% else %}Only <code>elicitd dev</code> serves this page; a
production elicitd has none here.{% endif %}</footer>
</body>
</html>
"""

_SIGN_IN = """{% extends "base.html" %}
{% block content %}
<h1 id="sign-in-title">Sign in to Dev ID</h1>
<p><span class="app">{{ client_name }}</span> wants to know who you are.</p>
<form method="post" action="{{ action }}" id="pick">
<input type="hidden" name="request" value="{{ request_id }}">
<p class="muted">Pick a user:</p>
<div class="users">
{% for user in users %}<button type="submit" class="user" name="username" value="{{ user }}"
 data-initial="{{ user[0] | upper }}" id="user-{{ user }}">{{ user }}</button>
{% endfor %}</div>
</form>
<form method="post" action="{{ action }}" id="type">
<input type="hidden" name="request" value="{{ request_id }}">
<label for="username">or type any user name</label>
<div class="row"><input type="text" id="username" name="username" autocomplete="username"
 pattern="[A-Za-z0-9][A-Za-z0-9._-]{0,63}" placeholder="e.g. dana" value="{{ hint }}" required>
<button type="submit" id="sign-in">Sign in</button></div>
{% if problem %}<p class="error" id="problem">{{ problem }}</p>{% endif %}
</form>
<form method="post" action="{{ action }}" class="actions">
<input type="hidden" name="request" value="{{ request_id }}">
<button type="submit" class="secondary" name="cancel" value="1" id="cancel">Cancel</button>
</form>
<p class="muted">The name you pick is your user id (<code>sub</code>) at
<code>{{ issuer }}</code>. It goes back to <code>{{ return_host }}</code>.</p>
{% endblock %}
"""

_CONSENT = """{% extends "base.html" %}
{% block content %}
<h1 id="consent-title"><span class="app">{{ client_name }}</span> wants to access your Demo Files account</h1>
<form method="post" action="{{ action }}" id="consent-form">
<input type="hidden" name="request" value="{{ request_id }}">
<label for="account">Your Demo Files account</label>
<input type="text" id="account" name="account" value="{{ account }}" required
 pattern="[A-Za-z0-9][A-Za-z0-9._-]{0,63}" autocomplete="username">
<p class="muted">{% if signed_in %}Signed in as <strong>{{ account }}</strong> through Dev ID.
{% else %}Any name works: each name has its own files.{% endif %}</p>
{% if problem %}<p class="error" id="problem">{{ problem }}</p>{% endif %}
<p>It will be able to:</p>
<ul class="scopes" id="scopes">
{% for scope in scopes %}<li>{{ scope.words }} <code class="muted">{{ scope.name }}</code></li>
{% endfor %}</ul>
<p class="muted">It will not be able to change or delete anything. You can disconnect it at any time.</p>
<div class="actions">
<button type="submit" name="decision" value="allow" id="allow">Allow</button>
<button type="submit" name="decision" value="deny" class="secondary" id="deny">Deny</button>
</div>
</form>
<p class="muted">After you choose, you go back to <code>{{ return_host }}</code>.</p>
{% endblock %}
"""

_PROBLEM = """{% extends "base.html" %}
{% block content %}
<h1 id="problem-title">{{ title }}</h1>
<p id="problem">{{ message }}</p>
{% endblock %}
"""

# What a stand-in (or the dev instance) is and how to use it: the page a person finds at the
# address the banner printed, instead of a JSON 404.
_ABOUT = """{% extends "base.html" %}
{% block content %}
<h1 id="about-title">{{ title }}</h1>
<p>{{ intro }}</p>
<dl class="facts" id="facts">
{% for label, value, link in facts %}<dt>{{ label }}</dt>
<dd>{% if link %}<a href="{{ link }}"><code>{{ value }}</code></a>{% else %}<code>{{ value }}</code>{% endif %}</dd>
{% endfor %}</dl>
{% if example %}<p>{{ example_intro }}</p>
<pre><code id="example">{{ example }}</code></pre>{% endif %}
{% if next %}<p class="muted">{{ next }}</p>{% endif %}
{% endblock %}
"""

_ENVIRONMENT = Environment(
    loader=DictLoader(
        {
            "base.html": _BASE,
            "sign_in.html": _SIGN_IN,
            "consent.html": _CONSENT,
            "problem.html": _PROBLEM,
            "about.html": _ABOUT,
        }
    ),
    autoescape=select_autoescape(default=True, default_for_string=True),
)

DEV_ID_LOOK = {"brand": "Dev ID", "accent": "#3c2a8c", "background": "#eeebf7", "kind": "identity provider"}
DEMO_FILES_LOOK = {"brand": "Demo Files", "accent": "#0d7a6f", "background": "#e8f4f2", "kind": "file service"}
DEV_INSTANCE_LOOK = {
    "brand": "elicitd dev",
    "accent": "#37474f",
    "background": "#eceff1",
    "kind": "",
    "tag": "development instance",
}

# The dev pages' own headers: never cached or framed, no referrer, only their inline styles.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
}


def render(template: str, look: dict[str, str], status: int = 200, **context: Any) -> Response[str]:
    html = _ENVIRONMENT.get_template(template).render(**look, **context)
    return Response(html, status_code=status, media_type="text/html", headers=dict(PAGE_HEADERS))


def problem_page(look: dict[str, str], message: str, *, title: str = "This request cannot be used") -> Response[str]:
    return render("problem.html", look, status=400, title=title, message=message)
