# optu-eqsat service image, both roles. Build: docker build -t optu-eqsat .
#   API:    docker run -p 8000:8000 optu-eqsat            (optu serve)
#   worker: docker run -e OPTU_QUEUE_URL=redis://HOST:6379/1 optu-eqsat worker   (any number)
# Two stages: the builder installs the locked dependencies (requirements.lock, `make lock`: exact
# versions with hashes, so every build resolves the same) and the project's wheel into /opt/venv, then leaves
# out what the service never runs (pip, setuptools, test suites, debug symbols); the runtime
# copies only that venv onto a fresh slim base.

FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# strip (binutils) only in the builder: egglog's extension alone carries ~200 MB of symbols
RUN apt-get update \
    && apt-get install -y --no-install-recommends binutils=2.40-2 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# The dependencies first, in a layer of their own: a source change does not reinstall them.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock
# Only what the wheel is built from (see [tool.setuptools] in pyproject.toml).
COPY pyproject.toml README.md ./
COPY wire ./wire
COPY service ./service
COPY rewrites ./rewrites
COPY costmodel ./costmodel
COPY lowering ./lowering
COPY validation ./validation
COPY bench ./bench
# tests/test_dockerfile.py runs this same `pip wheel` line. `pip check`: the lock satisfies the
# project's own requirements, or the build stops here.
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && pip install --no-deps /wheels/*.whl \
    && pip check
# Debug symbols and test suites are dead weight at run time; pip and setuptools go last. jaxlib and
# the libraries wheels vendor (*.libs) keep their symbols: stripped, JAX's extension fails to load.
RUN find /opt/venv -name "*.so*" -type f -not -path "*/jaxlib/*" -not -path "*.libs/*" \
        -exec strip --strip-unneeded {} + \
    && find /opt/venv/lib/python3.11/site-packages -type d -name tests -prune -exec rm -rf {} + \
    && python -m pip uninstall --yes pip setuptools

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
# One probe for both roles: a worker's heartbeat reached the broker lately, or the API answers /healthz.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "service.health"]
ENTRYPOINT ["optu"]
CMD ["serve"]
