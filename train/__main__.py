"""``python -m train --config train/configs/<name>.yaml --workdir DIR [--resume]``

Trains the policy-value network by self-play (see ``train/loop.py``). Metrics go to
stdout, DIR/metrics.csv and DIR/tensorboard; checkpoints to DIR/checkpoints (the last K
and the best by validation); the best network so far, in the hub format, to
DIR/best_model. ``--resume`` continues a stopped or killed run exactly where its last
checkpoint left it. Data parallelism uses every local device (config ``devices``); for
several hosts, call ``jax.distributed.initialize()`` first (see README).
"""

from __future__ import annotations

import argparse
import logging
import sys

from train import config as C


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="YAML experiment config (see train/configs/)")
    p.add_argument("--workdir", required=True, help="run directory (checkpoints, metrics, best model)")
    p.add_argument("--resume", action="store_true", help="continue the run in --workdir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set data.path=/data/graphs --set steps=10 (YAML value)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() first (multi-host runs)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import yaml

    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--set needs KEY=VALUE, got {item!r}")
        overrides[key] = yaml.safe_load(value)
    try:
        config = C.load(args.config, overrides)
        config.validate()
    except C.ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    if args.distributed:
        import jax

        jax.distributed.initialize()
    from train.loop import train

    try:
        out = train(config, args.workdir, resume=args.resume, progress=not args.no_progress)
    except C.ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in out.items() if k != "params"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
