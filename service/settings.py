"""The one Settings object: every limit and knob of the service, from OPTU_* environment variables."""
from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPTU_")

    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 32 * 1024 * 1024
    max_equations: int = 20_000
    default_time_limit_s: float = 10.0
    max_time_limit_s: float = 60.0
    default_node_limit: int = 50_000
    max_node_limit: int = 500_000
    max_iter_limit: int = 100
    default_hardware: str = "optu-v1"


@lru_cache
def get_settings() -> Settings:
    return Settings()
