"""The operator console at ``/console/``: server-rendered pages over the admin services."""
