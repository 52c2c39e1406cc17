"""The image's health probe, for both of its roles (`python -m service.health`): healthy is a
worker whose heartbeat reached the broker lately, or, where no worker runs, an API that answers
/healthz. It imports little, so a probe takes a fraction of a second."""
from __future__ import annotations

import sys

import httpx

from service.http.settings import Settings, get_settings
from service.jobqueue.broker import Timing, heartbeat_age_s


def healthy(settings: Settings) -> bool:
    age = heartbeat_age_s()
    if age is not None:
        return age < 3 * Timing(settings.queue_visibility_timeout_s).heartbeat_s
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    try:
        return httpx.get(f"http://{host}:{settings.port}/healthz", timeout=4).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(0 if healthy(get_settings()) else 1)
