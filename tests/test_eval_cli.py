"""``python -m eval`` on a fresh clone: without ``--data`` it evaluates the examples shipped
in the package (split as ``python -m data_gen build`` splits them) at a short default
budget and says so on stderr; reports record paths inside the repository relative to it."""

from __future__ import annotations

import json
import os

import pytest

from eval import __main__ as cli
from eval import common as C
from eval import readme_results as RR
from eval import report as R

# baselines only (no model to load), one graph, no runtime table: seconds, not minutes
FAST = ["--methods", "optimal", "--budgets", "0.2", "--no-jacobian-bench", "--quiet"]


def _read_json(path):
    with open(path) as f:
        return json.load(f)


def test_without_data_the_published_tasks_shipped_in_the_package_are_evaluated(tmp_path, capsys):
    out = str(tmp_path / "r")
    assert cli.main(["--out", out, "--families", "published:1"] + FAST) == 0
    err = capsys.readouterr().err
    notice = [line for line in err.splitlines() if "no --data given" in line]
    assert len(notice) == 1 and "alphagrad.examples" in notice[0] and "--budgets 5,30,60" in notice[0]
    rep = _read_json(os.path.join(out, "report.json"))
    assert rep["config"]["data"] is None and rep["dataset"]["source"].startswith("alphagrad.examples")
    assert rep["dataset"]["rows_in_split"] == 10 and rep["dataset"]["families_in_split"] == {"published": 10}
    assert rep["dataset"]["families_evaluated"] == {"published": 1}
    assert rep["evaluated_ok"] == 3 and not rep["failures"]
    # the zoo is train/validation of the same split rule: the published tasks are not in it
    leak = next(c for c in rep["checks"] if c["check"].startswith("no held-out graph"))
    assert leak["status"] == "pass" and "alphagrad.examples:train (53)" in leak["detail"]
    assert "alphagrad.examples:validation (6)" in leak["detail"]
    (jac,) = rep["jacobian_checks"]
    assert jac["status"] == "pass"
    with open(os.path.join(out, "report.md")) as f:
        assert "alphagrad.examples (no --data)" in f.read()
    assert "dataset `alphagrad.examples (no --data)`" in RR.summary_markdown(rep)


def test_without_data_the_zoo_is_the_train_split(tmp_path, capsys):
    out = str(tmp_path / "r")
    assert cli.main(["--out", out, "--split", "train", "--limit", "1", "--families", "minpack"] + FAST) == 0
    rep = _read_json(os.path.join(out, "report.json"))
    assert "published" not in rep["dataset"]["families_in_split"]
    assert sum(rep["dataset"]["families_in_split"].values()) == 53
    assert rep["dataset"]["families_evaluated"] == {"minpack": 1}


@pytest.mark.parametrize("argv, budgets", [([], (5.0,)), (["--data", "somewhere"], (5.0, 30.0, 60.0)),
                                           (["--budgets", "2,1"], (1.0, 2.0))])
def test_default_budgets_are_short_without_a_dataset(monkeypatch, argv, budgets):
    seen = {}
    monkeypatch.setattr(R, "run", lambda config: (seen.setdefault("config", config), 0))
    assert cli.main(["--out", "unused"] + argv) == 0
    assert seen["config"].budgets == budgets


def test_data_that_is_a_file_is_reported(tmp_path):
    f = tmp_path / "train.parquet"
    f.write_text("")
    out = str(tmp_path / "r")
    assert cli.main(["--data", str(f), "--out", out] + FAST) == 1
    rep = _read_json(os.path.join(out, "report.json"))
    assert "is a file" in rep["failures"][0]["reason"]


def test_paths_inside_the_repository_are_recorded_relative_to_it(tmp_path):
    inside = os.path.join(C.REPO_ROOT, "eval", "results", "x")
    outside = str(tmp_path / "data")
    assert cli.command_line(["--out", inside, "--data", outside, f"--train-data={inside}", "--budgets", "5"]) == (
        f"python -m eval --out eval/results/x --data {outside} --train-data=eval/results/x --budgets 5")
    assert C.display_path(inside) == "eval/results/x" and C.display_path("data/v1") == "data/v1"
    assert C.display_path(os.path.dirname(C.REPO_ROOT)) == os.path.dirname(C.REPO_ROOT)
    assert C.display_path(None) is None
