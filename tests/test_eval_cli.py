"""``python -m eval`` on a fresh clone: without ``--data`` it evaluates the examples shipped
in the package (split as ``python -m data_gen build`` splits them) at a short default
budget and says so on stderr; reports record paths inside the repository relative to it;
arguments that cannot work are refused in one line, exit status 2, before any work."""

from __future__ import annotations

import json
import os

import datasets
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
    monkeypatch.setattr(cli, "_problem", lambda args: None)  # "somewhere" is no dataset
    monkeypatch.setattr(cli, "_agent", lambda p, args: None)
    monkeypatch.setattr(R, "run", lambda config, agent: (seen.setdefault("config", config), 0))
    assert cli.main(["--out", "unused"] + argv) == 0
    assert seen["config"].budgets == budgets


def _refused(argv, capsys, monkeypatch, tmp_path) -> str:
    """The one line ``python -m eval`` refuses ``argv`` with (exit status 2, nothing run or
    written)."""
    def no_work(*args, **kwargs):
        raise AssertionError("the evaluation started")

    monkeypatch.setattr(R, "run", no_work)
    out = tmp_path / "report"
    capsys.readouterr()  # what came before (datasets' progress bars)
    with pytest.raises(SystemExit) as info:
        cli.main(["--out", str(out), *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert err.startswith("python -m eval: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()
    return err


@pytest.mark.parametrize("argv, message", [
    (["--split", "bogus"], "alphagrad.examples has no split 'bogus' (splits: ['heldout', 'train', 'validation'])"),
    (["--data", "/nope"], "dataset directory '/nope' does not exist; build one with `python -m data_gen build"),
    (["--families", "nosuch"], "--families nosuch: split 'heldout' of alphagrad.examples (no --data) has no "
                               "family 'nosuch' (families: published)"),
    (["--families", "published", "nosuch:2"], "has no family 'nosuch'"),
    (["--families", "published:x"], "--families published:x: expected FAMILY or FAMILY:N with N >= 1"),
    (["--split", "train", "--families", "published"], "split 'train' of alphagrad.examples (no --data) has no "
                                                      "family 'published' (families: "),
    (["--model", "does/not/exist"], "cannot load the model does/not/exist: Directory 'does/not/exist' does not "
                                    "exist"),
    (["--budgets", "nan"], "argument --budgets: 'nan': budgets must be finite positive seconds"),
    (["--budgets", "5,inf"], "argument --budgets: '5,inf': budgets must be finite positive seconds"),
    (["--budgets", "5,-1"], "budgets must be finite positive seconds"),
    (["--zero-shot-budget", "nan"], "argument --zero-shot-budget: 'nan': expected finite positive seconds"),
    (["--extra", "anneal@nan"], "argument --extra: 'anneal@nan': expected METHOD@SECONDS"),
    (["--limit", "0"], "argument --limit: '0': expected an integer >= 1"),
    (["--seed", "-1"], "argument --seed: '-1': expected an integer from 0 to 4294967295"),
    (["--jac-repeats", "0"], "argument --jac-repeats: '0': expected an integer >= 1"),
    (["--train-data", "/nope"], "--train-data /nope: no such dataset directory"),
])
def test_arguments_that_cannot_work_are_one_line_and_exit_2_before_any_work(argv, message, capsys, monkeypatch,
                                                                           tmp_path):
    assert message in _refused(argv, capsys, monkeypatch, tmp_path)


def test_an_out_that_is_a_file_and_data_that_is_a_file_are_refused(tmp_path, capsys, monkeypatch):
    f = tmp_path / "train.parquet"
    f.write_text("")
    err = _refused(["--data", str(f)], capsys, monkeypatch, tmp_path)
    assert f"--data {str(f)!r} is a file; pass the directory written by `python -m data_gen build" in err
    with pytest.raises(SystemExit) as info:
        cli.main(["--out", str(f)] + FAST)
    assert info.value.code == 2
    assert capsys.readouterr().err == (f"python -m eval: error: --out {f}: {f} is a file; give a directory for the "
                                       "report (created if needed)\n")
    with pytest.raises(SystemExit):
        cli.main(["--out", str(f / "sub")] + FAST)
    assert f"--out {f / 'sub'}: {f} is a file" in capsys.readouterr().err
    assert f.read_text() == ""


def test_an_empty_split_is_refused(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data"
    features = datasets.Features({"family": datasets.Value("string")})
    datasets.DatasetDict({s: datasets.Dataset.from_dict({"family": f}, features=features) for s, f in
                          (("heldout", ["published"]), ("validation", []))}).save_to_disk(
        str(data), num_shards={"heldout": 1, "validation": 1})  # as data_gen saves an empty split
    err = _refused(["--data", str(data), "--split", "validation"], capsys, monkeypatch, tmp_path)
    assert f"split 'validation' of {data} has no rows" in err
    err = _refused(["--data", str(data), "--split", "test"], capsys, monkeypatch, tmp_path)
    assert f"{str(data)!r} has no split 'test' (splits: ['heldout', 'validation'])" in err


def test_paths_inside_the_repository_are_recorded_relative_to_it(tmp_path):
    inside = os.path.join(C.REPO_ROOT, "eval", "results", "x")
    outside = str(tmp_path / "data")
    assert cli.command_line(["--out", inside, "--data", outside, f"--train-data={inside}", "--budgets", "5"]) == (
        f"python -m eval --out eval/results/x --data {outside} --train-data=eval/results/x --budgets 5")
    assert C.display_path(inside) == "eval/results/x" and C.display_path("data/v1") == "data/v1"
    assert C.display_path(os.path.dirname(C.REPO_ROOT)) == os.path.dirname(C.REPO_ROOT)
    assert C.display_path(None) is None
