"""Real ``save_checkpoint`` calls SIGKILLed at chosen points, for the writers' crash tests.

Run as a script: ``python -m tests._killed_save ROOT FORMAT POINTS``.  It imports torch once
and then forks one process per point (forking is what makes hundreds of kills affordable).
Each forked process starts a 1-rank gloo group, prepares the MLP on torch-fsdp2, trains two
steps and saves the step-2 checkpoint into ``ROOT/kill-N`` (a copy of ``ROOT/old``: the user's
files and the step-1 checkpoint) while a tracer counts the lines it runs in
``shardcompat/_atomic.py`` and ``shardcompat/checkpoint/``; at the N-th it SIGKILLs itself.
Point 0 never kills: it prints the number of lines a whole save runs.  ``old`` and ``new``
(the complete step-1 and step-2 saves) are what a killed save must leave, one or the other.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

USER = {"notes.txt": b"the user's notes", "logs/run.log": b"loss 0.5\n", "rng/mine.txt": b"the user's"}
_WATCHED = (os.sep + os.path.join("shardcompat", "_atomic.py"), os.sep + os.path.join("shardcompat", "checkpoint") + os.sep)


def _save(root: Path, target: Path, sharded: bool, step: int, kill_at: int) -> int:
    """In a forked process: train ``step`` steps, save into ``target``; return lines counted."""
    import torch
    import torch.distributed as dist

    import shardcompat
    from tests._parity import OPTIMIZERS, batch, build_model, loss_fn

    torch.set_num_threads(1)
    store = root / f"store-{os.getpid()}"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    torch.manual_seed(0)
    prepared = shardcompat.prepare(build_model("mlp"), OPTIMIZERS["adamw"], "zero_dp_3", backend="torch-fsdp2")
    for s in range(step):
        x, y = batch("mlp", 0, s)
        prepared.backward(loss_fn("mlp", prepared(x), y))
        prepared.step()
        prepared.zero_grad()
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if not any(w in frame.f_code.co_filename for w in _WATCHED):
            return None
        if event == "line":
            count += 1
            if count == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return trace

    sys.settrace(trace)
    prepared.save_checkpoint(target, step=step, sharded=sharded)
    sys.settrace(None)
    dist.destroy_process_group()
    return count


def _forked(root: Path, target: Path, sharded: bool, step: int, kill_at: int) -> tuple[int, int]:
    """(exit status as ``waitstatus_to_exitcode`` gives it, lines counted or -1)."""
    out = root / f"count-{kill_at}-{step}"
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            out.write_text(str(_save(root, target, sharded, step, kill_at)))
            code = 0
        except BaseException as error:  # reported through the exit status and stderr
            print(f"point {kill_at}: {type(error).__name__}: {error}", file=sys.stderr)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    count = int(out.read_text()) if out.exists() else -1
    return os.waitstatus_to_exitcode(status), count


def _points(spec: Any, total: int) -> list[int]:
    """``[n, ...]`` as given; ``{"fractions": [f, ...]}`` of the lines a whole save runs;
    ``{"count": k}``: k points spread evenly, plus the last few lines (the commit's end)."""
    if isinstance(spec, list):
        return [int(p) for p in spec]
    if "fractions" in spec:
        return sorted({max(1, min(total, round(f * total))) for f in spec["fractions"]})
    step = max(1, total // int(spec["count"]))
    return sorted({*range(1, total + 1, step), *range(max(1, total - 5), total + 1)})


def main(root_arg: str, fmt: str, points_arg: str) -> None:
    import torch  # noqa: F401  (imported once, before the forks)

    root, sharded = Path(root_arg), fmt == "sharded"
    old = root / "old"
    for rel, data in USER.items():
        (old / rel).parent.mkdir(parents=True, exist_ok=True)
        (old / rel).write_bytes(data)
    results: dict[str, Any] = {"old": _forked(root, old, sharded, 1, 0)}
    shutil.copytree(old, root / "new", symlinks=True)
    results["new"] = _forked(root, root / "new", sharded, 2, 0)  # over the old one, as the kills do
    points = _points(json.loads(points_arg), results["new"][1])
    for point in points:
        target = root / f"kill-{point}"
        shutil.copytree(old, target, symlinks=True)
        results[str(point)] = _forked(root, target, sharded, 2, point)
        if "again" not in results and (target / ".shardcompat-commit.json").exists():
            # killed after its commit point: a new save into it (not a load) must finish it first
            again = root / "again"
            shutil.copytree(target, again, symlinks=True)
            results["again"] = _forked(root, again, sharded, 2, 0)
    print(json.dumps(results))


# ---------------------------------------------------------------------- the test side
def sweep(root: Path, fmt: str, points: Any, timeout: float) -> dict[str, Any]:
    """Run the kills in a child interpreter; return its results (see :func:`_points`)."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "tests._killed_save", str(root), fmt, json.dumps(points)],
        cwd=repo, capture_output=True, text=True, timeout=timeout, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert results["old"][0] == 0 and results["new"][0] == 0, done.stderr[-3000:]
    return results


def _model(path: Path) -> dict[str, Any]:
    from shardcompat.checkpoint import _sharded, read_manifest
    from shardcompat.checkpoint._common import load_torch

    if read_manifest(path)["kind"] == "sharded":
        return _sharded.read_full(path)[0]
    state: dict[str, Any] = load_torch(path / "model.pt")
    return state


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def check_all(root: Path, results: dict[str, Any]) -> list[int]:
    """:func:`check_old_or_new` for every kill; the steps found, which must go 1 ... 2."""
    points = sorted(int(k) for k in results if k.isdigit())
    if "again" in results:
        assert results["again"][0] == 0, "a save into a folder where a save was killed after its commit failed"
    steps = [check_old_or_new(root, p, results[str(p)][0]) for p in points]
    assert steps == sorted(steps), f"a later kill left the older checkpoint: {list(zip(points, steps))}"
    assert steps[0] == 1 and steps[-1] == 2, f"the kills did not straddle the commit: {list(zip(points, steps))}"
    return steps


def check_old_or_new(root: Path, point: int, status: int) -> int:
    """After a kill at ``point``: a load finds the old or the new checkpoint whole, or (killed
    while moving files into place) refuses it, changing nothing, and the next save's recover()
    finishes it; then the user's files are byte-identical and nothing of ours is left over.
    Returns its step."""
    import torch

    from shardcompat._atomic import JOURNAL, recover
    from shardcompat.checkpoint import CheckpointError, read_manifest

    target = root / f"kill-{point}"
    assert status == -signal.SIGKILL, f"point {point}: the save exited {status} instead of being killed"
    before = _tree(target)
    try:
        manifest = read_manifest(target)  # verifies every checksum; never rolls a journal forward
    except CheckpointError as error:
        assert (target / JOURNAL).exists() and "stopped while moving" in str(error), f"point {point}: {error}"
        manifest = None
    assert _tree(target) == before, f"point {point}: reading changed the folder"
    recover(target)  # what the next save into it runs first
    if manifest is None:
        manifest = read_manifest(target)
    assert int(read_manifest(target)["step"]) == int(manifest["step"]), f"point {point}: recover changed the step"
    step = int(manifest["step"])
    reference = root / ("old" if step == 1 else "new")
    ours = {rel for rel in manifest["files"]}
    assert ours == set(read_manifest(reference)["files"]), f"point {point}: not the files of step {step}"
    model, want = _model(target), _model(reference)
    assert model.keys() == want.keys() and all(torch.equal(model[k], want[k]) for k in want), f"point {point}: a mix"
    for rel, data in USER.items():
        assert (target / rel).read_bytes() == data, f"point {point}: the user's {rel} changed"
    everything = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    assert everything == ours | set(USER) | {"manifest.json"}, f"point {point}: {sorted(everything - ours)}"
    return step


if __name__ == "__main__":
    main(*sys.argv[1:])
