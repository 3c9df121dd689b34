"""``python -m data_gen build --out DIR --num-random N --seed S [--num-proc P] [--large K]``
``python -m data_gen label --data DIR [--num-proc P]``

Builds (or resumes) the graph dataset in DIR: a Hugging Face DatasetDict (train,
validation, heldout; ``datasets.load_from_disk(DIR)``), its Parquet export in
DIR/parquet/, a dataset card DIR/README.md and DIR/failures.json. Work is saved chunk by
chunk in DIR/chunks/; running the same command again after an interruption continues
where it stopped. See ``data_gen/dataset.py`` for the columns and the distributions.

``label`` anneals the train and validation graphs of DIR and stores policy and value
targets beside them in DIR/labels/ (resumable the same way; see ``data_gen/labels.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from data_gen import dataset as D


def _pair(name):
    return dict(nargs=2, type=int, metavar=("LOW", "HIGH"), dest=name)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m data_gen", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build or resume a dataset", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--out", required=True, help="output directory")
    b.add_argument("--num-random", type=int, required=True,
                   help="random programs of the training distribution (train + validation)")
    b.add_argument("--seed", type=int, required=True, help="build seed (>= 0)")
    b.add_argument("--num-proc", type=int, default=1, help="worker processes (spawn); 1: in this process")
    b.add_argument("--large", type=int, default=16, help="large held-out graphs (default 16)")
    b.add_argument("--large-size", **_pair("large_size"),
                   help="intermediates of a large graph (default 300 500)")
    b.add_argument("--large-max-ops", type=int, default=None, metavar="N",
                   help=f"most operations of a large random program (default {D.LARGE.num_ops[1]}, about 800 "
                        f"intermediates; up to {D.rp.RANGES['num_ops'][1]})")
    b.add_argument("--large-train", type=int, default=0,
                   help="large training graphs (random programs and chained zoo functions; default 0)")
    b.add_argument("--large-train-size", **_pair("large_train_size"),
                   help="intermediates of a large training graph (default 300 2000)")
    b.add_argument("--stepped-train", type=int, default=0,
                   help="stepped training graphs of --large-train-size: a small random program iterated like a "
                        "time-stepping loop, every other one summed into a scalar loss (default 0)")
    b.add_argument("--shared-train", type=int, default=0,
                   help="training graphs like --stepped-train's whose step carries one input and shares the "
                        "others (weights) across steps, with wider values (default 0)")
    b.add_argument("--num-heldout", type=int, default=None,
                   help="random programs of the held-out distribution (default ceil(N/10))")
    b.add_argument("--validation-fraction", type=float, default=0.1)
    b.add_argument("--max-structures", type=int, default=D.DEFAULT_MAX_STRUCTURES,
                   help="graphs whose rule tables exceed this are reported as failures")
    b.add_argument("--chunk-size", type=int, default=D.DEFAULT_CHUNK_SIZE,
                   help="graphs per chunk (training distribution; other groups use fractions)")
    b.add_argument("--zoo", default="all",
                   help="zoo examples: all, none, published, or comma-separated names")
    for dist in ("train", "heldout"):
        for field in ("num_ops", "max_rank", "max_dim", "num_inputs", "num_outputs", "width", "fan_in"):
            flag = f"--{dist}-{field.replace('_', '-')}"
            b.add_argument(flag, **_pair(f"{dist}__{field}"),
                           help=f"range of ProgramSpec.{field} in the {dist} distribution "
                                f"(default {' '.join(map(str, getattr(getattr(D, dist.upper()), field)))})")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument("--quiet", action="store_true", help="no log lines or summary")
    from data_gen.labels import LabelConfig  # numpy and the standard library only

    lab = sub.add_parser("label", help="make or resume the training labels of a dataset")
    lab.add_argument("--data", required=True, help="the dataset directory (from `build`)")
    lab.add_argument("--num-proc", type=int, default=1, help="worker processes (spawn); 1: in this process")
    lab.add_argument("--limit", type=int, default=None, help="label at most this many graphs per split")
    lab.add_argument("--validation-limit", type=int, default=256,
                     help="label at most this many validation graphs (default 256; the trainer validates on a prefix)")
    lab.add_argument("--policy", default=None,
                     help="a model directory (e.g. alphagrad/pretrained): label the states its greedy policy reaches "
                          "(a DAgger round; train split only)")
    lab.add_argument("--name", default="labels", help="directory under --data to write (default labels)")
    lab.add_argument("--screen", type=int, default=None,
                     help="with --policy: also anneal the rest of each order from forward and from reverse for "
                          "1/SCREEN of the moves, and go on from the cheaper if it beats the policy's rest "
                          f"(default {LabelConfig.screen}; 0: the policy's rest alone)")
    lab.add_argument("--splits", type=int, default=None,
                     help="with --policy: label this many of the policy's states per graph, at depths spread "
                          f"over its game, one row each (default {LabelConfig.splits})")
    lab.add_argument("--depth", type=float, nargs=2, default=None, metavar=("LO", "HI"),
                     help="with --policy: draw the labelled states from these fractions of the policy's game "
                          "(default 0 1: all of it; 0.6 0.95: the late game, where greedy orders lose)")
    lab.add_argument("--rollouts", type=int, default=None,
                     help="with --policy: store this many orders sampled from the policy per graph with their "
                          "advantage (a REINFORCE set, one row per order) instead of annealed completions")
    lab.add_argument("--candidates", type=int, default=None,
                     help="with --policy: at each labelled greedy state of the policy, sample this many first moves "
                          "beside the greedy one, complete each by the policy's greedy play, and take the cheapest "
                          "as targets (rollout policy improvement)")
    lab.add_argument("--temperature", type=float, default=None,
                     help=f"with --rollouts or --candidates: the sampling temperature (default {LabelConfig.temperature})")
    lab.add_argument("--positions", type=int, default=None,
                     help=f"labelled states per graph, or with --rollouts per order (default {LabelConfig.positions})")
    lab.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def config_from_args(args) -> D.BuildConfig:
    """The BuildConfig of parsed arguments; ValueError names a bad one."""
    dists = {}
    for dist in ("train", "heldout"):
        base = getattr(D, dist.upper())
        changes = {}
        for key, value in vars(args).items():
            if key.startswith(f"{dist}__") and value is not None:
                changes[key.split("__", 1)[1]] = tuple(value)
        dists[dist] = dataclasses.replace(base, **changes)
    zoo = args.zoo if args.zoo in ("all", "none", "published") else tuple(
        n.strip() for n in args.zoo.split(",") if n.strip())
    kwargs = dict(seed=args.seed, num_random=args.num_random, num_heldout=args.num_heldout,
                  large=args.large, large_train=args.large_train, stepped_train=args.stepped_train,
                  shared_train=args.shared_train,
                  validation_fraction=args.validation_fraction,
                  max_structures=args.max_structures, chunk_size=args.chunk_size, zoo=zoo,
                  train=dists["train"], heldout=dists["heldout"])
    if args.large_size is not None:
        kwargs["large_size"] = tuple(args.large_size)
    if args.large_max_ops is not None:
        top = D.rp.RANGES["num_ops"][1]
        if not 1 <= args.large_max_ops <= top:
            raise ValueError(f"--large-max-ops = {args.large_max_ops} must be an integer in [1, {top}]")
        kwargs["large_dist"] = D.LARGE.replace(num_ops=(1, args.large_max_ops))
    if args.large_train_size is not None:
        kwargs["large_train_size"] = tuple(args.large_train_size)
    config = D.BuildConfig(**kwargs)
    config.validate()
    return config


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.command == "build":
        if args.num_proc < 1:
            p.error(f"--num-proc = {args.num_proc} must be >= 1")
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            p.error(f"--out {args.out!r} is a file; give a directory for the dataset (it is created if it "
                    f"does not exist, and resumed if it holds an interrupted build)")
        try:
            config = config_from_args(args)
        except ValueError as e:
            p.error(str(e))
        try:
            D.build(args.out, config, num_proc=args.num_proc, progress=not args.no_progress, quiet=args.quiet)
        except D.BuildDirectoryError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\ninterrupted: finished chunks are kept in {args.out}/chunks; run the same "
                  f"command again to continue", file=sys.stderr)
            return 130
    if args.command == "label":
        from data_gen import labels

        if args.num_proc < 1:
            p.error(f"--num-proc = {args.num_proc} must be >= 1")
        if args.screen is not None and args.policy is None:
            p.error("--screen sets how a policy's states are completed; it needs --policy MODEL")
        if args.splits is not None and args.policy is None:
            p.error("--splits sets how many of a policy's states are labelled; it needs --policy MODEL")
        if args.depth is not None and args.policy is None:
            p.error("--depth sets where a policy's states are drawn from; it needs --policy MODEL")
        if args.rollouts is not None and args.policy is None:
            p.error("--rollouts samples a policy's orders; it needs --policy MODEL")
        if args.candidates is not None and args.policy is None:
            p.error("--candidates completes moves by a policy's own play; it needs --policy MODEL")
        if args.temperature is not None and args.rollouts is None and args.candidates is None:
            p.error("--temperature is the sampling temperature of --rollouts or --candidates; it needs one of them")
        given = {k: v for k, v in (("screen", args.screen), ("splits", args.splits), ("depth", args.depth),
                                   ("rollouts", args.rollouts),
                                   ("candidates", args.candidates),
                                   ("temperature", args.temperature), ("positions", args.positions))
                 if v is not None}
        try:  # LabelConfig checks the bounds
            config = labels.LabelConfig(**given)
        except ValueError as e:
            p.error(f"--{e}")
        try:
            rows = labels.build_labels(args.data, config, num_proc=args.num_proc, progress=not args.no_progress,
                                       limit=args.limit, validation_limit=args.validation_limit,
                                       policy=args.policy, name=args.name)
        except (FileNotFoundError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\ninterrupted: finished chunks are kept in {args.data}/{args.name}/chunks; run the same "
                  f"command again to continue", file=sys.stderr)
            return 130
        print(f"labels: {rows} rows in {os.path.join(args.data, args.name)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
