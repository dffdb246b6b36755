"""Test sessions, from the default suite to the torch x fairscale version matrix.

    nox -s tests                 # the default suite (torch 2.13.0 CPU, no fairscale)
    nox -s lint                  # ruff + mypy on the packages
    nox -s "fairscale(0.4.13)"   # the fairscale part of the suite with one fairscale version
    nox -s matrix                # every torch x fairscale combination
    nox -s reliability           # the long reliability suite (fuzzing, dying ranks)
    nox -s multinode             # two torchrun agents on localhost: 2x2 jobs, kills, a lost node
    nox -s "transformers(4.34.1)"  # the Trainer integration's full grid with one Transformers release
    nox -s precision             # --fp16/--bf16 x clipping x every option through shardcompat run (long)
    nox -s gpu                   # the gpu-marked tests, on a CUDA machine
    nox -s upstream_examples -- PATH  # Transformers' own 4.x example scripts (PATH: their examples/pytorch)
    nox -s docs                  # the docs, warnings as errors

Tests skip by probed capability (with the reason), never by version string, so each
session runs the same suite and the skips say what that combination cannot do.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

DEFAULT_TORCH = "2.13.0"  # a CPU build lies on the CI machines' disk
TORCH_VERSIONS = ["2.13.0", "2.14.1"]
FAIRSCALE_VERSIONS = ["0.1.7", "0.3.0", "0.3.9", "0.4.0", "0.4.13"]
# What changes when fairscale is installed: its backends, the facade, checkpoints across backends,
# what `explain` and the planner say of it, and what its probes could do to the random streams of
# the training they watch (the Trainer's whole grid runs with fairscale too:
# transformers(current-fairscale)).  Only files whose tests depend on fairscale: what does not
# (the launcher's failures, the command line as a process) runs once, in the default suite.
FAIRSCALE_TESTS = [
    "tests/backends/test_fairscale_sdp.py",
    "tests/backends/test_fairscale_fsdp.py",
    "tests/backends/test_fairscale_mixed_precision.py",
    "tests/fairscale",
    "tests/backends/test_observing.py",  # each release's probes leave the random streams (issue 38)
    "tests/test_checkpoint.py",
    "tests/test_cli.py",
    "tests/test_failures.py",
    "-q",
]

# The Hugging Face Trainer integration: the current release, and 4.34.1, the last with
# sharded_ddp (it passes dispatch_batches= to Accelerator, which accelerate 1.0 removed).
# 4.34.1 pins huggingface_hub below 1.0: the datasets of its time (2.14.7, with pandas 2) import there.
# "current-fairscale" is the current release with fairscale installed beside it: the Trainer's parity
# tests there prove that fairscale's probes and the facade change nothing a run draws (issue 38).
TRANSFORMERS_RELEASES = {"current": (), "current-fairscale": (),
                         "4.34.1": ("transformers==4.34.1", "accelerate==0.27.2", "datasets==2.14.7", "pandas<3")}
# On "current-fairscale", what fairscale can change runs whole: every mode's parity and random
# streams with fairscale's probes, its own backends' cases, a 4.x subclass building fairscale's
# OSS, what the legacy names say of fairscale.  Of the other files, the default session has
# already run the lean grid on this release: only the full grid's additions run here
# (tests/transformers/_grid.py).  Not test_legacy_migrated.py: its reference is the migrated
# script on stock torchrun, which loads neither shardcompat nor fairscale, and its shardcompat
# side is test_legacy_scripts.py's.
TRAINER_FAIRSCALE_TESTS = [
    *(f"tests/transformers/{name}.py" for name in ("test_trainer", "test_observing", "test_legacy_table_surface")),
    # the one run whose subclass builds fairscale's OSS itself (its other runs never import fairscale)
    "tests/transformers/test_subclasses.py::test_a_4x_subclass_runs_unchanged_and_trains_as_its_port_on_stock_ddp[simple]",
]
TRAINER_GRID_ADDITIONS = [f"tests/transformers/{name}.py" for name in (
    "test_legacy_scripts", "test_legacy_resume", "test_run")]


# Two pytest workers, each taking whole modules (a module's tests share its module-scoped
# fixture, often a training run, so it must not run on both).  Many tests wait (for ranks to
# start, a collective to time out, a killed job to stop): on CI's 2 cores the other worker fills
# that time.  Measured on that machine: the default suite 1011 -> 874 s, the reliability suite
# 363 -> 194 s; the fairscale part gains nothing and stays serial (docs/ci.md).  Not multinode:
# its 4-rank jobs keep both cores busy already.
WORKERS = ["-n", "2", "--dist", "loadscope"]


def _pip(session: nox.Session, *args: str, keeps_base: bool = False) -> None:
    """``pip install`` into the session's venv; under ``nox --no-venv``, into the active venv.

    ``.ci/run`` makes one venv and runs every session in it (``--no-venv``): a venv per session
    installed torch and the test extras afresh each time, a minute of each session.  Each session
    still brings that venv to its own packages (below), so it tests what its own venv would hold.
    ``keeps_base``: this install leaves the base install (``_base_stamp``) as it was.
    """
    if session.venv_backend != "none":
        session.install(*args)
        return
    active = os.environ.get("VIRTUAL_ENV")
    python = shutil.which("python")
    if not active or not python or Path(python).parent != Path(active) / "bin":  # a venv's python is a link
        session.error("nox --no-venv installs into the active venv only, never the system Python: "
                      "activate one first (.ci/run does: python3 -m venv .ci-venv)")
    session.run("python", "-m", "pip", "install", "-q", *args)
    if not keeps_base:
        _base_stamp().unlink(missing_ok=True)


def _base_stamp() -> Path:
    """In the shared venv: which torch and which tree ``_install`` last installed there, unchanged
    since (any other install removes it).  ``pip install -e .[test]`` of the same tree again is
    about 8 s of a session and changes nothing."""
    return Path(os.environ["VIRTUAL_ENV"]) / "shardcompat-ci-base.txt"


def _install(session: nox.Session, *packages: str, torch: str = DEFAULT_TORCH,
             fairscale: str | None = None) -> None:
    base = f"torch=={torch} {Path.cwd()} {hashlib.sha256(Path('pyproject.toml').read_bytes()).hexdigest()}"
    shared = session.venv_backend == "none"
    if not (shared and _base_stamp().is_file() and _base_stamp().read_text() == base):
        _pip(session, f"torch=={torch}")
        _pip(session, "-e", ".[test]")
        if shared:
            _base_stamp().write_text(base)
    if packages:
        _pip(session, *packages)
    if fairscale:
        # fairscale builds from source against the installed torch (no build isolation, which
        # would fetch another torch); before 0.4 it uses numpy without declaring it.  Every
        # release builds with the setuptools torch itself needs (>= 77 for torch 2.13/2.14).
        # Both are already satisfied but fairscale: the base install stands.
        _pip(session, "setuptools", "wheel", "numpy", keeps_base=True)
        _pip(session, "--no-build-isolation", f"fairscale=={fairscale}", keeps_base=True)
    elif session.venv_backend == "none":  # a shared venv's earlier session may have installed it
        session.run("python", "-m", "pip", "uninstall", "-q", "-y", "fairscale")


def _timed_run(session: nox.Session, *args: str, **kwargs: Any) -> None:
    """``session.run`` a test command, its wall time recorded for ``.ci/run``'s table."""
    start = time.monotonic()
    try:
        session.run(*args, **kwargs)
    finally:
        record = os.environ.get("SHARDCOMPAT_CI_TIMES")
        if record:
            with open(record, "a") as out:
                out.write(f"{session.name}\ttests\t{time.monotonic() - start:.1f}\n")


def _pytest(session: nox.Session, *default: str) -> None:
    _timed_run(session, "python", "-m", "pytest", *(session.posargs or default))
    # What this combination serves, for docs/compatibility.md (see `matrix_check`).
    record = ".matrix/" + re.sub(r"[^\w.]+", "-", session.name).strip("-") + ".json"
    session.run("python", "-m", "shardcompat.matrix", "collect", "--out", record)


@nox.session
def tests(session: nox.Session) -> None:
    """The default suite: what CI and the README run (with its 30 slowest tests at the end)."""
    _install(session)
    _pytest(session, *WORKERS, "--durations=30")


@nox.session
@nox.parametrize("fairscale", FAIRSCALE_VERSIONS, ids=FAIRSCALE_VERSIONS)
def fairscale(session: nox.Session, fairscale: str) -> None:
    """The backend tests with one fairscale version next to torch 2.13."""
    _install(session, fairscale=fairscale)
    _pytest(session, *FAIRSCALE_TESTS)


@nox.session
@nox.parametrize("fairscale", [None, *FAIRSCALE_VERSIONS], ids=["none", *FAIRSCALE_VERSIONS])
@nox.parametrize("torch", TORCH_VERSIONS, ids=TORCH_VERSIONS)
def matrix(session: nox.Session, torch: str, fairscale: str | None) -> None:
    """Every torch x fairscale combination, the whole suite each."""
    _install(session, torch=torch, fairscale=fairscale)
    _pytest(session)


SECURITY = ["tests/test_checkpoint_attacks.py", "tests/test_dcp_metadata.py"]


@nox.session
def reliability(session: nox.Session) -> None:
    """The long reliability suite: grammar fuzz, dying ranks, migrate over torch's and fairscale's sources,
    and the attacks that a checkpoint from elsewhere must not get through."""
    _install(session, fairscale=FAIRSCALE_VERSIONS[-1])  # fairscale's files join the migrate corpus
    _timed_run(session, "python", "-m", "pytest", "-m", "reliability and not multinode",
                *(session.posargs or [*WORKERS, "tests/reliability"]))
    if not session.posargs:  # the attacks on untrusted checkpoints (issue 33), also in the default suite
        _timed_run(session, "python", "-m", "pytest", *SECURITY)


@nox.session
def multinode(session: nox.Session) -> None:
    """tests/multinode: two torchrun agents on localhost meeting through c10d rendezvous (2x2),
    compared with one-node DDP; a killed worker, a lost node, checkpoints across layouts, a
    Trainer script; with tests/test_resume.py's and the reliability suite's torchrun kill tests.
    CPU and gloo only: what is verified where is in docs/compatibility.md."""
    _install(session)
    _timed_run(session, "python", "-m", "pytest", "-m", "multinode", *(session.posargs or [
        "tests/multinode", "tests/test_resume.py", "tests/reliability/test_restarts.py",
        "tests/reliability/test_kill_on_appearance.py", "tests/reliability/test_trainer_kill_on_appearance.py",
        "-q"]))


@nox.session
@nox.parametrize("transformers", list(TRANSFORMERS_RELEASES), ids=list(TRANSFORMERS_RELEASES))
def transformers(session: nox.Session, transformers: str) -> None:
    """tests/transformers with every stage, FSDP1 and more checkpoint pairs, on one Transformers release.

    On 4.34.1 this is also the proof that the legacy-names layer is inert where the release has the
    4.30 API itself (tests/transformers/test_legacy_inert.py, and test_legacy_scripts.py with the
    unported script as its own reference).
    """
    _install(session, fairscale=FAIRSCALE_VERSIONS[-1] if transformers.endswith("fairscale") else None)
    if TRANSFORMERS_RELEASES[transformers]:
        # Under .ci/run's one venv this release stays installed: .ci/run runs this session last.
        _pip(session, *TRANSFORMERS_RELEASES[transformers])
    session.env["SHARDCOMPAT_TRANSFORMERS_GRID"] = "full"
    if transformers == "current-fairscale" and not session.posargs:
        _timed_run(session, "python", "-m", "pytest", *WORKERS, *TRAINER_FAIRSCALE_TESTS, "-q")
        session.env["SHARDCOMPAT_TRANSFORMERS_GRID"] = "additions"
        _timed_run(session, "python", "-m", "pytest", *WORKERS, *TRAINER_GRID_ADDITIONS, "-q")
        return
    # Two workers also with posargs: .ci/run gives the 4.34.1 session its own selection.
    _timed_run(session, "python", "-m", "pytest", *WORKERS, *(session.posargs or ["tests/transformers", "-q"]))


@nox.session
def precision(session: nox.Session) -> None:
    """tests/transformers/test_precision_run.py's whole grid on the current Transformers (10-18 minutes)."""
    _install(session)
    session.env["SHARDCOMPAT_PRECISION_GRID"] = "full"
    _timed_run(session, "python", "-m", "pytest", *(session.posargs or ["tests/transformers/test_precision_run.py", "-q"]))


@nox.session
def gpu(session: nox.Session) -> None:
    """On a machine with CUDA: the gpu-marked tests, then benchmarks/gpu_check.py's table.

    torch 2.14.1 from PyPI is a CUDA build; fairscale is installed so its CUDA paths (real
    streams, pinned memory, the sharded grad scaler) run too.  See docs/performance.md.
    """
    _install(session, torch="2.14.1", fairscale=FAIRSCALE_VERSIONS[-1])
    _pytest(session, "-m", "gpu", "-ra")
    session.run("python", "-m", "benchmarks.gpu_check")


@nox.session(venv_backend="none")
def matrix_check(session: nox.Session) -> None:
    """Is docs/compatibility.md current for the combinations the sessions above ran?"""
    session.run("python3", "-m", "shardcompat.matrix", "check", "docs/compatibility.md",
                *sorted(str(p) for p in Path(".matrix").glob("*.json")), external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation, warnings as errors (the option reference is generated from the code)."""
    _pip(session, "-r", "docs/requirements.txt")  # conf.py imports shardcompat from the tree
    _timed_run(session, "sphinx-build", "-W", "--keep-going", "-q", "-b", "html", "docs", "docs/_build/html")


@nox.session
def lint(session: nox.Session) -> None:
    _install(session, "ruff", "mypy")
    _timed_run(session, "ruff", "check", "shardcompat", "codemods", "tests", "benchmarks", "examples", ".ci",
               "noxfile.py")
    _timed_run(session, "mypy")
    _timed_run(session, "mypy", "examples", ".ci/import_all.py")


@nox.session
def legacy_survey(session: nox.Session) -> None:
    """Every public name of Transformers 4.30.2 the installed release lacks has a row in the legacy table."""
    _install(session, "transformers")
    wheels = Path(session.create_tmp()) / "wheels"
    session.run("python", "-m", "pip", "download", "transformers==4.30.2", "--no-deps", "-q", "-d", str(wheels))
    wheel = next(wheels.glob("transformers-4.30.2-*.whl"))
    _timed_run(session, "python", "-m", "pytest", "-q", "tests/transformers/test_legacy_table_wheel.py",
               env={"SHARDCOMPAT_LEGACY_WHEEL": str(wheel)})


@nox.session
def upstream_examples(session: nox.Session) -> None:
    """Transformers' own 4.x example scripts (not in this repository: PATH is the examples/pytorch
    folder of a checkout, e.g. from ``git archive v4.30.2 examples``) run unchanged under shardcompat
    run and, migrated, on stock torchrun, with the same losses (issue 30).  Not in CI: CI has no
    copy of those files."""
    if not session.posargs:
        session.error("give the examples/pytorch folder of a Transformers 4.x checkout: "
                      "nox -s upstream_examples -- PATH")
    _install(session)  # the test extra has evaluate, which the 4.x examples import
    where = str(Path(session.posargs[0]).resolve())
    session.run("python", "-m", "pytest", "-m", "upstream", "-q", "tests/upstream", *session.posargs[1:],
                env={"SHARDCOMPAT_UPSTREAM_EXAMPLES": where})
