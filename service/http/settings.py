"""The one Settings object: every limit and knob of the service, from OPTU_* environment variables.
Only the HTTP app, the client and the CLI read it; the optimizer is passed what it needs."""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from fastapi import Request
from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from costmodel.profile import DEFAULT_PROFILE
from service.optimizer.options import DEFAULT_NODE_LIMIT, DEFAULT_TIME_LIMIT_S, OptimizeOptions


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPTU_")

    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 32 * 1024 * 1024
    max_equations: int = 20_000
    default_time_limit_s: float = DEFAULT_TIME_LIMIT_S
    max_time_limit_s: float = 60.0
    default_node_limit: int = DEFAULT_NODE_LIMIT
    max_node_limit: int = 500_000
    max_iter_limit: int = 100
    default_hardware: str = DEFAULT_PROFILE
    max_tensor_elements: int = 1 << 26  # per declared tensor: validation materializes them
    # Operation (service/jobqueue/, service/http/cache.py, service/http/auth.py, service/http/metrics.py)
    workers: int = 2
    queue_depth: int = 16  # requests waiting for a worker beyond this get 503 + Retry-After
    job_queue_depth: int = 64  # jobs queued or running beyond this get 429 + Retry-After
    job_ttl_s: float = 3600.0  # a finished job is forgotten this long after (its result stays cached)
    queue_url: str | None = None  # redis://host:port/db: jobs go to `optu worker` processes through Celery
    queue_visibility_timeout_s: float = 30.0  # a job whose worker is lost runs again after about this long
    deadline_grace_s: float = 5.0  # a worker past time limit + grace is killed and replaced
    # A worker's first optimization runs before it takes requests (service/optimizer/warm_up.py), so
    # the first request is as fast as the tenth; off, a worker is ready as soon as it has imported JAX.
    warm_up: bool = True
    cache_dir: str = ".optu-cache"  # embedded SQLite cache lives here
    cache_url: str | None = None  # redis://host:port/db to share the cache between replicas
    api_token: str | None = None  # when set, /v1/* requires Authorization: Bearer <token>
    log_level: str = "INFO"

    @field_validator("queue_url", "cache_url")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        if url and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"expected a redis://host:port/db URL, got {url!r}")
        return url


@lru_cache
def get_settings() -> Settings:
    return Settings()


def request_options(options: OptimizeOptions | dict[str, Any] | None, settings: Settings) -> OptimizeOptions:
    """A request's options as the optimizer runs them: this server's defaults where the request
    left a limit unset, and its caps applied."""
    options = OptimizeOptions.coerce(options)
    return options.model_copy(update={
        "time_limit_s": min(options.time_limit_s or settings.default_time_limit_s, settings.max_time_limit_s),
        "node_limit": min(options.node_limit or settings.default_node_limit, settings.max_node_limit),
        "iter_limit": min(options.iter_limit, settings.max_iter_limit)})


def settings_of(request: Request) -> Settings:
    """The settings of the app serving `request` (a route's dependency)."""
    return request.app.state.settings
