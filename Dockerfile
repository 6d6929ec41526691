# elicitd: one process type (the Litestar app under uvicorn). Migrations run as a one-shot
# `elicitd migrate` (see compose.yaml), never implicitly at start.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY service ./service
COPY elicitd_client ./elicitd_client
COPY migrations ./migrations
# constraints.txt pins every distribution: the image gets the versions the tests ran with. Only the
# `server` extra: no embedded PostgreSQL/Redis, test or lint tools in production.
RUN pip install --no-compile -c constraints.txt ".[server]" && useradd --system --uid 10001 elicitd
USER elicitd
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
CMD ["elicitd", "serve", "--host", "0.0.0.0", "--port", "8000"]
