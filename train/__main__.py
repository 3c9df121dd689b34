"""``python -m train --config train/configs/<name>.yaml --workdir DIR [--resume] [--max-hours H]``

Trains the policy-value network on labelled states (see ``train/loop.py``), or by
AlphaZero self-play for a config of ``mode: selfplay`` (``train/selfplay.py``). Metrics go
to stdout, DIR/metrics.csv and DIR/tensorboard; checkpoints to DIR/checkpoints (the last
K and the best by validation); the best network so far, in the hub format, to
DIR/best_model. ``--resume`` continues a stopped or killed run exactly where its last
checkpoint left it; ``--max-hours`` stops after that much wall time (with a checkpoint),
for runs in chunks.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from train import config as C


def _has_checkpoint(workdir: str) -> bool:
    ckpt = os.path.join(workdir, "checkpoints")
    return os.path.isdir(ckpt) and any(name.isdigit() for name in os.listdir(ckpt))


def workdir_problem(workdir: str, resume: bool) -> str | None:
    """What is wrong with ``--workdir`` (and ``--resume``), with what to do; None if nothing."""
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        return (f"--workdir {workdir!r} is a file; give a directory for the run (it is created if it "
                f"does not exist)")
    if resume and not os.path.exists(workdir):
        return (f"--resume: the run directory {workdir!r} does not exist, so there is no run to continue; "
                f"drop --resume to start a new run there, or fix the --workdir path")
    if resume and not (os.path.isdir(os.path.join(workdir, "checkpoints"))
                       or os.path.isfile(os.path.join(workdir, "config.json"))):
        return (f"--resume: {workdir!r} holds no training run (no checkpoints/ or config.json); drop "
                f"--resume to start a new run there, or fix the --workdir path")
    return None


def _saved_config(workdir: str, overrides: dict) -> C.TrainConfig:
    """The config a run in ``workdir`` was started with (its config.json), with ``overrides``."""
    import json

    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        raise C.ConfigError(f"--resume without --config reads the run's {path}, which does not exist; pass --config")
    with open(path) as f:
        return C.from_dict(C.overridden(json.load(f), overrides))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML experiment config (see train/configs/); with --resume, default: the "
                   "run's own (DIR/config.json)")
    p.add_argument("--workdir", required=True, help="run directory (checkpoints, metrics, best model)")
    p.add_argument("--resume", action="store_true", help="continue the run in --workdir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set data.path=/data/graphs --set steps=10 (YAML value)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--max-hours", type=float, default=None,
                   help="stop after this many hours of training (a checkpoint is written; --resume continues)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every file it writes
    import yaml

    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--set needs KEY=VALUE, got {item!r}")
        overrides[key] = yaml.safe_load(value)
    config = None
    if args.config is None and not args.resume:
        p.error("--config is required (without --resume)")
    try:
        config = C.load(args.config, overrides) if args.config else _saved_config(args.workdir, overrides)
        config.validate()
    except C.ConfigError as e:
        hint = None  # the config's own build command for its missing data set
        if config is not None and args.config and str(e).startswith(f"data.path {config.data.path!r} does not exist"):
            hint = C.build_command(args.config, config.data.path)
        print(f"config error: {e}" if hint is None else
              f"config error: data.path {config.data.path!r} does not exist; build it with the command "
              f"{args.config} gives for it:\n    {hint}", file=sys.stderr)
        return 2
    problem = workdir_problem(args.workdir, args.resume)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.resume and not _has_checkpoint(args.workdir):
        print(f"--resume: {args.workdir} holds no checkpoint yet (the run stopped before its first); "
              f"starting it from step 0", file=sys.stderr)
    if args.max_hours is not None and not args.max_hours > 0:
        p.error(f"--max-hours must be > 0, got {args.max_hours}")
    if config.mode == "selfplay":
        from train.selfplay import train
    else:
        from train.loop import train

    try:
        out = train(config, args.workdir, resume=args.resume, progress=not args.no_progress,
                    max_seconds=None if args.max_hours is None else 3600 * args.max_hours)
    except C.ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in out.items() if isinstance(v, (int, float))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
