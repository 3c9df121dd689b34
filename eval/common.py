"""What several eval modules share: how reports name paths and datasets, the package's
examples as a dataset, the machine line, the geometric mean, Markdown cells and tables,
reading a report.json, generated blocks in README-like files, and the rows, flags and
report files of the benchmarks on large held-out graphs."""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import sys

#: The repository the eval package belongs to (paths inside it are reported relative to it).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What reports call the dataset when none is given: the examples shipped in the package.
EXAMPLES_SOURCE = "alphagrad.examples"
#: Held-out zoo families a dataset build holds but the examples dataset leaves out: the
#: real-sized programs (500-5,000 intermediates; evaluate them from a build with
#: ``--data DIR --families large_real``).
EXAMPLES_EXCLUDED_FAMILIES = ("large_real",)
#: The held-out families of large graphs (300+ intermediates).
LARGE_FAMILIES = ("large_random", "large_zoo_chained", "large_real")


# --------------------------------------------------------------------------------------
# Paths and datasets.


def display_path(path):
    """``path`` as a report shows it: an absolute path inside the repository relative to
    the repository root (so the command reruns on another machine); anything else as given."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return path
    rel = os.path.relpath(os.path.normpath(path), REPO_ROOT)
    return path if rel == ".." or rel.startswith(".." + os.sep) else rel.replace(os.sep, "/")


def dataset_label(data) -> str:
    """The dataset as a report names it (``data`` None: the package's examples)."""
    return f"{EXAMPLES_SOURCE} (no --data)" if data is None else display_path(data)


_EXAMPLES: dict = {}


def examples_dataset():
    """The examples shipped in :mod:`alphagrad.examples` as a ``DatasetDict`` of dataset
    rows (the columns of ``python -m data_gen build``), split as a build splits them:
    ``heldout`` the published tasks, ``train``/``validation`` the rest of the zoo (by a hash
    of the name), without :data:`EXAMPLES_EXCLUDED_FAMILIES`. Traced once per process (a few
    seconds)."""
    import datasets as hf

    from data_gen import dataset as D

    if "dd" not in _EXAMPLES:
        config = D.BuildConfig(seed=0, num_random=0)
        zoo = [e for e in D.zoo_examples("all") if e.family not in EXAMPLES_EXCLUDED_FAMILIES]
        by_split: dict = {s: [] for s in D.SPLITS}
        for ex in zoo:
            row, failure = D.compute_item(config, "zoo", ex.name, zoo)
            if failure is not None:
                raise RuntimeError(f"example {ex.name}: {failure['stage']}: {failure['reason']}")
            by_split[row.pop("split")].append(row)
        features = D.features()
        _EXAMPLES["dd"] = hf.DatasetDict({s: hf.Dataset.from_list(rows, features=features)
                                          for s, rows in by_split.items()})
    return _EXAMPLES["dd"]


def load_split(path: str | None, split: str):
    """``(dataset_dict, split_dataset)``; raises with a readable reason. ``path`` None: the
    package's examples (:func:`examples_dataset`)."""
    import datasets as hf

    if path is None:
        dd = examples_dataset()
        if split not in dd:
            raise KeyError(f"{EXAMPLES_SOURCE} has no split {split!r} (splits: {sorted(dd)})")
        return dd, dd[split]
    if os.path.isfile(path):
        raise NotADirectoryError(f"--data {path!r} is a file; pass the directory written by "
                                 f"`python -m data_gen build --out DIR`")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"dataset directory {path!r} does not exist; build one with "
                                f"`python -m data_gen build --out {path}`")
    dd = hf.load_from_disk(path)
    if not isinstance(dd, hf.DatasetDict):
        raise ValueError(f"{path!r} holds a single Dataset, not a DatasetDict with splits")
    if split not in dd:
        raise KeyError(f"{path!r} has no split {split!r} (splits: {sorted(dd)})")
    return dd, dd[split]


# --------------------------------------------------------------------------------------
# Numbers and Markdown.


def machine() -> str:
    """The machine line of the benchmarks' reports: the processor (or architecture), the
    core count and, where JAX is loaded and runs on an accelerator, that accelerator, e.g.
    ``x86_64, 2 cores`` or ``x86_64, 13 cores, 1 x TPU v5 lite``."""
    line = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    jax = sys.modules.get("jax")
    if jax is not None and jax.default_backend() != "cpu":
        devices = jax.devices()
        line += f", {len(devices)} x {devices[0].device_kind}"
    return line


def geomean(xs) -> float | None:
    """The geometric mean of the positive finite values of ``xs`` (None if there are none)."""
    xs = [x for x in xs if x is not None and 0 < x < math.inf]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def fmt(x, nd=3) -> str:
    """A table cell: ``n/a`` for None, ``inf``, a float to ``nd`` decimals, else str."""
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return "inf" if x == math.inf else f"{x:.{nd}f}"
    return str(x)


def md_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table (newlines in cells become spaces, pipes are escaped)."""
    def cell(v):
        return " ".join(str(v).split("\n")).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def load_report(report_dir: str) -> dict:
    """The report.json of a ``python -m eval`` output directory (or that file's path)."""
    path = report_dir if report_dir.endswith(".json") else os.path.join(report_dir, "report.json")
    with open(path) as f:
        return json.load(f)


# --------------------------------------------------------------------------------------
# Generated blocks.


def splice(text: str, block: str, open_mark: str, close_mark: str, where: str = "") -> str:
    """``text`` with what lies between its one ``open_mark`` and its one ``close_mark``
    (in that order) replaced by ``block``."""
    start, end = text.find(open_mark), text.find(close_mark)
    if start == -1 or end == -1 or end < start or text.count(open_mark) != 1 or text.count(close_mark) != 1:
        raise ValueError(f"{where}expected exactly one {open_mark} followed by one {close_mark}")
    return text[:start + len(open_mark)] + "\n" + block.strip() + "\n" + text[end:]


def put_block(path: str, block: str, open_mark: str, close_mark: str) -> None:
    """Replaces what lies between ``open_mark`` and ``close_mark`` (exactly one of each, in
    that order) in the file ``path`` with ``block``: how the benchmarks fill README."""
    with open(path) as f:
        text = splice(f.read(), block, open_mark, close_mark, f"{path}: ")
    with open(path, "w") as f:
        f.write(text)


# --------------------------------------------------------------------------------------
# Benchmarks on the large held-out graphs.


def large_rows(data: str, split: str, per_family: int):
    """The first ``per_family`` rows of each family of :data:`LARGE_FAMILIES` in ``data:split``."""
    import datasets as hf

    count = collections.Counter()
    for row in hf.load_from_disk(data)[split]:
        if row["family"] in LARGE_FAMILIES and count[row["family"]] < per_family:
            count[row["family"]] += 1
            yield row


def add_graph_arguments(p: argparse.ArgumentParser, data: str) -> None:
    """The model and graph selection flags the large-graph benchmarks share."""
    p.add_argument("--model", default="alphagrad/pretrained")
    p.add_argument("--data", default=data)
    p.add_argument("--split", default="heldout")
    p.add_argument("--per-family", type=int, default=4)


def write_report(p, args, argv, report: dict, markdown, title: str, what: str) -> None:
    """Writes a benchmark's ``report`` (with the command that made it and the machine) to
    ``args.out/report.json`` and its ``markdown`` table under ``title`` to ``report.md``,
    and prints the table; no rows is a usage error."""
    if not report["rows"]:
        p.error(f"no graph of the families {LARGE_FAMILIES} in {args.data}:{args.split}")
    report["command"] = f"{p.prog} " + " ".join(argv if argv is not None else sys.argv[1:])
    report["machine"] = machine()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    table = markdown(report)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(f"# {title}\n\n`{report['command']}` ({report['machine']}): {what}\n\n{table}\n")
    print(table)
