"""The image on a real Docker engine: built from the working tree, run read-only on the host
network with a cache volume, healthy by its own HEALTHCHECK, serving a validated optimization to
the real client as a user that is not root, and draining an in-flight request on SIGTERM before
it exits 0. Without an engine these tests skip on a developer's machine and fail under CI=true."""
from __future__ import annotations

import threading
import uuid

import httpx
import pytest
from docker_engine import docker, healthy
from polling import poll_until
from wire_examples import sum_program

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from service.client import optimize
from service.http.devserver import free_port

pytestmark = pytest.mark.container

STOP_TIMEOUT_S = 60  # docker stop's SIGKILL after this: exit 137 instead of 0 would show it


@pytest.fixture(scope="module")
def container(image):
    """(base url, container name) of the image running read-only on a free loopback port."""
    name, volume, port = f"optu-test-{uuid.uuid4().hex[:8]}", f"optu-test-cache-{uuid.uuid4().hex[:8]}", free_port()
    docker("run", "-d", "--name", name, "--network", "host", "--read-only", "--tmpfs", "/tmp",
           "-v", f"{volume}:/var/cache/optu", "-e", f"OPTU_PORT={port}", "-e", "OPTU_HOST=127.0.0.1",
           "-e", "OPTU_WORKERS=1", image)
    try:
        poll_until(lambda: healthy(name), bool)  # a cold JAX import, then the first health probe
        yield f"http://127.0.0.1:{port}", name
    finally:
        docker("rm", "-f", name, check=False)
        docker("volume", "rm", "-f", volume, check=False)


def test_the_image_serves_a_validated_optimization_as_a_user_that_is_not_root(container):
    url, name = container
    fn, args = ZOO["rnn_unrolled"]()  # its projections hoisted out of the steps: checked by running them
    result = optimize(fn, *args, server=url, weight_argnums=WEIGHT_ARGNUMS["rnn_unrolled"])
    assert result.validation["status"] == "passed"
    assert docker("exec", name, "id", "-u").stdout.strip() not in ("", "0")


def test_sigterm_lets_the_request_in_flight_finish_and_the_container_exits_0(container):
    url, name = container
    answer: dict[str, httpx.Response] = {}
    body = {"program": sum_program(120, 24), "options": {"time_limit_s": 4, "node_limit": 10**6}}
    sender = threading.Thread(target=lambda: answer.update(r=httpx.post(url + "/v1/optimize", json=body,
                                                                         timeout=300)))
    sender.start()
    poll_until(lambda: httpx.get(url + "/readyz", timeout=10).json().get("workers", {}).get("busy"),
               lambda busy: busy == 1 or not sender.is_alive())
    assert sender.is_alive(), answer  # the request is in flight when the container is told to stop
    stopped = docker("stop", "--time", str(STOP_TIMEOUT_S), name, timeout=STOP_TIMEOUT_S + 60)
    sender.join(timeout=120)
    assert answer["r"].status_code == 200, answer["r"].text
    assert docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0", stopped
