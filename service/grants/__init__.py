"""Who may use a connection: grants, trust groups, the grant page and the user's own page (``/me``)."""
