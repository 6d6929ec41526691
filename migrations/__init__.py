"""The Alembic chain. A package only so that the wheel can carry it, as ``service.migrations``
(pyproject.toml maps it); Alembic itself loads every script by path."""
