# elicitd: one process type (the Litestar app under uvicorn). Migrations run as a one-shot
# `elicitd migrate` (see compose.yaml), never implicitly at start.
#
# Two stages: the first builds elicitd's wheel from the package sources (the top-level migrations/
# folder, templates and static files ship inside it); the second installs that wheel, so the image
# runs exactly what `pip install 'elicitd[server]'` gives, with no source tree beside it.
#
# BASE is the Python 3.11 image both stages start from. The default is the official one; where no
# registry can be reached, deploy/image/local-base.sh makes an equivalent from Debian's packages
# (debootstrap) and the build names it: `podman build --build-arg BASE=localhost/elicitd-base:bookworm .`
ARG BASE=python:3.11-slim
FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY migrations ./migrations
COPY elicitd_client ./elicitd_client
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
# constraints.txt pins every distribution: the image gets the versions the tests ran with. Only the
# `server` extra: no embedded PostgreSQL/Redis, test or lint tools in production.
COPY constraints.txt /tmp/constraints.txt
# Bytecode is compiled here, once (pip's default), so a start reads .pyc files instead of
# compiling every module from source on a read-only filesystem (about 2.5 s of CPU per start).
COPY --from=build /wheels /wheels
RUN set -e; wheel="$(echo /wheels/elicitd-*.whl)"; \
    pip install -c /tmp/constraints.txt "${wheel}[server]"; \
    rm -rf /wheels /tmp/constraints.txt; \
    groupadd --system --gid 10001 elicitd; \
    useradd --system --uid 10001 --gid 10001 --create-home elicitd
# Numeric, so Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
USER 10001:10001
WORKDIR /home/elicitd
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
CMD ["elicitd", "serve", "--host", "0.0.0.0", "--port", "8000"]
