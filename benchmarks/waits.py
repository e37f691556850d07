"""What users wait for: a job's submit to its success recorded, and a search's trials, against their peers.

One interleaved run on a platform hosted as a server hosts it (`kpl_lab.rounds.Rounds`, a
round every --interval seconds and on each wake) with the platform's default supervision
settings, in a temporary home:

1. **Jobs**: `JobService.submit` of a script, to its `succeeded` recorded in the database
   (the job's `finished` time), against `subprocess.Popen` of the same script to its exit.
   Pairs, in turns first; the ratio is the median of the pairs' ratios.
2. **Trials**: an experiment of --trials trials of a tiny objective (the script reads its
   parameter with kpl_helper, pushes 3 points, prints its value), parallelism 1, from
   `ExperimentService.create` to the experiment's end recorded, against two peers that run
   the same script in a subprocess per trial, one after another: a plain loop (random
   parameters written to parameter.yml, the value read from the output), and, when Optuna
   is installed, Optuna's `study.optimize` (in-memory storage, the same random sampler).
   A trial's overhead is the difference to the plain loop, per trial.

A job pair and a 2-trial search of each kind run first, not counted (the forkserver's start,
Optuna's import). Every --rounds round runs --pairs job pairs, then one search of each kind
(their order turning). Medians over the rounds; the load average is printed before and after.

    python benchmarks/waits.py                          # 3 rounds of 5 job pairs and 12 trials each way
    python benchmarks/waits.py --rounds 5 --pairs 10 --trials 12 --interval 2
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from traitlets.config import Config

PROJECT = "bench"
JOB = "print('ok')\n"
TINY = (
    "import kpl_helper as kh\nfrom kpl_helper import metric\n"
    "p = kh.get_parameter(default='./parameter.yml')\n"
    "figure = metric.MetricFigure('score', y1_name='accuracy')\n"
    "for step in range(3):\n    figure.push_metric(x=step + 1, y1=p.quality * (step + 1) / 3)\n"
    "kh.done()\n"
    "print(p.quality)\n"
)
ENVIRONMENT = (
    "version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n      cpu: 1\n"
    "      memory: 256\n  cmd: python {script}\n"
)
POLL = 0.01  # seconds between looks at the database while waiting for an end


def open_platform(home: Path, interval: float):
    """Return a platform hosted as a server hosts it (rounds every `interval` s and on wakes), and its rounds."""
    from kpl_lab.monitoring.monitor import Monitor
    from kpl_lab.platform import Platform
    from kpl_lab.rounds import Rounds

    config = Config({"Ledger": {"cpu": 8.0, "memory": 1 << 16, "devices": {"gpu": []}}})
    platform = Platform(home=str(home), config=config)
    platform.jobs.load_config()
    rounds = Rounds(platform, last=Monitor(platform).steps())  # as `kpl_lab.server_ext.app` hosts it
    rounds.start(interval)
    return platform, rounds


def add_algorithm(platform, folder: Path, name: str, script: str, parameters: str) -> Path:
    """Add an algorithm of one script; return the script's path."""
    folder = folder / name
    folder.mkdir(parents=True)
    (folder / "environment.yml").write_text(ENVIRONMENT.format(script=f"{name}.py"))
    (folder / "parameter.yml").write_text(parameters)
    (folder / f"{name}.py").write_text(script)
    platform.catalog.add_algorithm(PROJECT, folder, name=name)
    return folder / f"{name}.py"


def job_pair(platform, script: Path, ours_first: bool) -> tuple[float, float]:
    """Return the seconds of one submit -> success recorded and of one Popen -> exit of the same script."""
    from kpl_lab.api.jobs import JobRequest
    from kpl_lab.catalog.serialize import utc

    def ours() -> float:
        start = time.time()
        job = platform.jobs.submit(JobRequest(project=PROJECT, algorithm=script.stem))
        while not (job := platform.jobs.get(PROJECT, job.id)).is_final:
            time.sleep(POLL)
        assert job.state == "succeeded", (job.state, job.reason)
        return utc(job.finished).timestamp() - start

    def bare() -> float:
        start = time.perf_counter()
        subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL).wait()
        return time.perf_counter() - start

    if ours_first:
        first = ours()
        return first, bare()
    second = bare()
    return ours(), second


def our_search(platform, name: str, trials: int) -> tuple[float, dict]:
    """Run an experiment of `trials` trials; return its seconds to the end recorded and where they went."""
    from kpl_lab.api.experiments import ExperimentRequest
    from kpl_lab.catalog.serialize import utc

    request = ExperimentRequest.model_validate(
        {
            "name": name,
            "algorithm": "tiny",
            "space": {"quality": {"type": "float", "low": 0.0, "high": 1.0}},
            "objective": {"metric": "score/accuracy"},
            "budget": {"trials": trials},
            "sampler": {"name": "random", "seed": 0},
        }
    )
    start = time.time()
    platform.experiments.create(PROJECT, request)
    while (experiment := platform.experiments.get(PROJECT, name)).state == "running":
        time.sleep(POLL)
    assert experiment.state == "succeeded", (experiment.state, experiment.reason)
    seconds = utc(experiment.finished).timestamp() - start
    jobs = [platform.jobs.records.job(trial.job_id) for trial in sorted(experiment.trials, key=_number)]
    ran = [(utc(job.finished) - utc(job.started)).total_seconds() for job in jobs]
    between = [(utc(b.created) - utc(a.finished)).total_seconds() for a, b in itertools.pairwise(jobs)]
    return seconds, {"job": statistics.median(ran), "end -> next submit": statistics.median(between)}


def _number(trial) -> int:
    return trial.number


def run_trial(script: Path, folder: Path, quality: float) -> float:
    """Run the objective once in a subprocess with this parameter; return the value it prints."""
    (folder / "parameter.yml").write_text(f"quality: {quality!r}\n")
    done = subprocess.run(
        [sys.executable, script.name], cwd=folder, capture_output=True, text=True, check=True
    )
    return float(done.stdout.split()[-1])


def plain_search(script: Path, folder: Path, trials: int) -> float:
    """Run the script once per random parameter, one after another; return the seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / script.name).write_text(script.read_text())
    draw = random.Random(0)
    start = time.perf_counter()
    max(run_trial(script, folder, draw.random()) for _ in range(trials))
    return time.perf_counter() - start


def optuna_search(script: Path, folder: Path, trials: int) -> float:
    """Run Optuna's own loop over the same script, a subprocess per trial; return the seconds."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / script.name).write_text(script.read_text())

    def objective(trial) -> float:
        return run_trial(script, folder, trial.suggest_float("quality", 0.0, 1.0))

    start = time.perf_counter()
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=trials)
    return time.perf_counter() - start


def has_optuna() -> bool:
    try:
        import optuna  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are printed)")
    parser.add_argument("--pairs", type=int, default=5, help="job pairs per round")
    parser.add_argument("--trials", type=int, default=12, help="trials of each search")
    parser.add_argument("--interval", type=float, default=2.0, help="the host's seconds between rounds")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kpl-waits-") as tmp:
        tmp_path = Path(tmp)
        platform, rounds = open_platform(tmp_path / "home", args.interval)
        try:
            script = add_algorithm(platform, tmp_path / "src", "job", JOB, "x: 1\n")
            tiny = add_algorithm(platform, tmp_path / "src", "tiny", TINY, "quality: 0.5\n")
            job_pair(platform, script, True)  # the forkserver starts with the first job: not counted
            our_search(platform, "warm", 2)  # Optuna's import and first study: once a server, not counted
            peers = {"plain": plain_search}
            if has_optuna():
                peers["Optuna"] = optuna_search
            for name, search in peers.items():
                search(tiny, tmp_path / f"{name}-warm", 2)
            pairs, ours, theirs, parts = [], [], {name: [] for name in peers}, []
            for number in range(args.rounds):
                for index in range(args.pairs):
                    pairs.append(job_pair(platform, script, index % 2 == 0))
                kinds = ["ours", *peers]
                for kind in kinds[number % len(kinds) :] + kinds[: number % len(kinds)]:  # turns first
                    if kind == "ours":
                        seconds, where = our_search(platform, f"search-{number}", args.trials)
                        ours.append(seconds)
                        parts.append(where)
                    else:
                        theirs[kind].append(peers[kind](tiny, tmp_path / f"{kind}-{number}", args.trials))
                print(
                    f"round {number + 1}: jobs {statistics.median(o / b for o, b in pairs[-args.pairs :]):.2f}x, "
                    f"trials {ours[-1]:.2f} s, "
                    + ", ".join(f"{name} {seconds[-1]:.2f} s" for name, seconds in theirs.items()),
                    file=sys.stderr,
                )
        finally:
            rounds.stop()
            platform.close()
    load_after = os.getloadavg()
    report(args, pairs, ours, theirs, parts, load_before, load_after)


def report(args, pairs, ours, theirs, parts, load_before, load_after) -> None:
    """Print the medians and ratios."""
    print(
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
        f"host rounds every {args.interval:g} s and on wakes"
    )
    ours_ms = statistics.median(o for o, _ in pairs) * 1000
    bare_ms = statistics.median(b for _, b in pairs) * 1000
    ratio = statistics.median(o / b for o, b in pairs)
    print(
        f"job submit -> success recorded  {ours_ms:.0f} ms  Popen -> exit {bare_ms:.0f} ms  "
        f"ratio {ratio:.2f}x (median of {len(pairs)} pairs)"
    )
    print(
        f"{args.trials} trials, medians of {args.rounds} rounds:  KPL search {statistics.median(ours):.2f} s"
    )
    for name, seconds in theirs.items():
        overhead = statistics.median((o - p) / args.trials for o, p in zip(ours, seconds, strict=True))
        ratio = statistics.median(o / p for o, p in zip(ours, seconds, strict=True))
        what = "a plain subprocess loop" if name == "plain" else "Optuna, a subprocess per trial"
        print(
            f"  against {what} {statistics.median(seconds):.2f} s:  ratio {ratio:.2f}x  "
            f"overhead {overhead:.3f} s per trial"
        )
    for key in parts[0]:
        print(f"  KPL per trial, {key}: {statistics.median(p[key] for p in parts):.3f} s")


if __name__ == "__main__":
    main()
