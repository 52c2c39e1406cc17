# optu-eqsat service image. Build: docker build -t optu-eqsat .   Run: docker run -p 8000:8000 optu-eqsat
# Two stages: the builder turns the project into a wheel and installs it (with its pinned
# dependencies) into /opt/venv; the runtime copies only that venv onto a fresh slim base.

FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# Only what the wheel is built from (see [tool.setuptools] in pyproject.toml).
COPY pyproject.toml README.md ./
COPY wire ./wire
COPY service ./service
COPY rewrites ./rewrites
COPY costmodel ./costmodel
COPY lowering ./lowering
COPY bench ./bench
# tests/test_dockerfile.py runs this same `pip wheel` line. redis is the client for
# OPTU_CACHE_URL=redis://... (docker-compose.yml); the embedded SQLite cache needs nothing.
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && pip install /wheels/*.whl "redis==5.2.1"

FROM python:3.11-slim AS runtime
LABEL org.opencontainers.image.title="optu-eqsat" \
      org.opencontainers.image.description="Equality-saturation optimizer service for JAX programs"
RUN groupadd --system --gid 10001 optu \
    && useradd --system --uid 10001 --gid optu --create-home --home-dir /home/optu optu \
    && mkdir -p /var/cache/optu \
    && chown optu:optu /var/cache/optu
COPY --from=builder /opt/venv /opt/venv
# Every setting is an OPTU_* variable (service/http/settings.py); override them with -e / compose.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    JAX_PLATFORMS=cpu \
    OPTU_HOST=0.0.0.0 \
    OPTU_PORT=8000 \
    OPTU_CACHE_DIR=/var/cache/optu
USER 10001:10001
WORKDIR /home/optu
EXPOSE 8000
# slim has no curl: probe with the standard library, on whatever port OPTU_PORT says.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('OPTU_PORT', '8000'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["optu"]
CMD ["serve"]
