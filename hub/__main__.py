"""``python -m hub``: check a saved alphagrad model, and push it to the Hugging Face Hub.

    python -m hub check DIR_OR_REPO_ID [--revision REV]
    python -m hub push DIR --repo-id ORG/NAME [--dry-run OUT] [--private] [--revision BRANCH]
                          [--commit-message MSG] [--create-pr]

``check`` loads the model exactly as ``alphagrad.from_pretrained`` does (config, finite float32
weights whose shapes fit the network) and prints its config and size. ``push`` checks the
directory the same way, then uploads its config.json, model.safetensors and README.md (an
alphagrad model card) byte for byte in one commit (``alphagrad.hub.push_folder``);
``--dry-run OUT`` copies exactly those files to OUT and touches no network. The token is
huggingface_hub's (``hf auth login`` or ``HF_TOKEN``). Exit status: 0 done, 2 the model or an
argument is wrong (the message says what to do), 1 the Hub refused or could not be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _load(target: str, revision: str | None = None):
    import alphagrad

    return alphagrad.from_pretrained(target, revision=revision)


def check(args) -> int:
    import jax
    import numpy as np

    agent = _load(args.target, args.revision)
    leaves = jax.tree_util.tree_leaves(agent.params)
    print(f"{args.target}: an alphagrad model")
    print(f"  parameters: {sum(int(np.size(x)) for x in leaves):,} in {len(leaves)} tensors (float32, finite)")
    print("  config: " + json.dumps(agent.config, sort_keys=True))
    return 0


def push(args) -> int:
    from alphagrad.hub import push_folder

    if not os.path.isdir(args.directory):
        print(f"error: {args.directory} is not a directory; give the directory a model was saved into "
              "(save_pretrained, python -m train.export)", file=sys.stderr)
        return 2
    _load(args.directory)  # the full check: the weights must fit the config's network
    where = push_folder(args.directory, args.repo_id, commit_message=args.commit_message, private=args.private,
                        revision=args.revision, create_pr=args.create_pr or None,
                        dry_run=args.dry_run if args.dry_run is not None else False)
    if args.dry_run is not None:
        print(f"dry run: wrote {', '.join(sorted(os.listdir(where)))} to {where}; nothing was uploaded")
    else:
        print(f"uploaded {args.directory} to https://huggingface.co/{args.repo_id}: {where}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="load a saved model (directory or Hub repo id) and print its config")
    p.add_argument("target", help="a model directory or a Hugging Face Hub repo id")
    p.add_argument("--revision", default=None, help="branch, tag or commit (Hub repos only)")
    p.set_defaults(run=check)
    p = sub.add_parser("push", help="upload a saved model directory to the Hugging Face Hub")
    p.add_argument("directory", help="the model directory (config.json, model.safetensors, README.md)")
    p.add_argument("--repo-id", required=True, help="the Hub repo, e.g. org/alphagrad-model (created if needed)")
    p.add_argument("--dry-run", metavar="OUT", default=None,
                   help="copy the files that would be uploaded to OUT (new or empty) instead of uploading")
    p.add_argument("--private", action="store_true", default=None, help="create the repo as private")
    p.add_argument("--revision", default=None, help="the branch to push to (created from main if needed)")
    p.add_argument("--commit-message", default="Upload alphagrad model")
    p.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    p.set_defaults(run=push)
    args = parser.parse_args(argv)

    from huggingface_hub.errors import HfHubHTTPError

    from alphagrad.hub import ModelLoadError

    try:
        return args.run(args)
    except (ModelLoadError, FileExistsError, NotADirectoryError, FileNotFoundError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (HfHubHTTPError, OSError) as e:
        print(f"error: the Hugging Face Hub: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
