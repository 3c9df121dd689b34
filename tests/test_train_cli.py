"""``python -m train`` refuses paths that cannot work before any training, with a message
that says what is wrong and what to do: ``data.path`` a file or missing (naming the build
command the config gives), a directory without a dataset, a dataset without labels (naming
``python -m data_gen label``), ``--workdir`` a file, ``--resume`` on a directory that holds
no run. Nothing here trains."""

from __future__ import annotations

import os
import shutil

import pytest

from train import __main__ as cli
from train import config as C

SMOKE = os.path.join(os.path.dirname(__file__), os.pardir, "train", "configs", "smoke.yaml")


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    return str(d)


def _run(capsys, *argv):
    code = cli.main(["--config", SMOKE, "--no-progress", *argv])
    return code, capsys.readouterr().err


def test_data_path_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "graphs.parquet"
    f.write_text("")
    code, err = _run(capsys, "--workdir", str(tmp_path / "run"), "--set", f"data.path={f}")
    assert code == 2
    assert "is a file, not a dataset" in err and "python -m data_gen build --out DIR" in err
    assert not (tmp_path / "run").exists()


def test_missing_data_path_names_the_configs_build_command(tmp_path, capsys):
    missing = str(tmp_path / "smoke_data")
    with open(SMOKE) as f:
        text = f.read()
    assert text.count("--out data/smoke ") == 1 and text.count("path: data/smoke") == 1
    config = tmp_path / "smoke.yaml"
    config.write_text(text.replace("data/smoke", missing))
    shutil.copy(os.path.join(os.path.dirname(SMOKE), "base.yaml"), tmp_path / "base.yaml")
    code = cli.main(["--config", str(config), "--workdir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and f"data.path {missing!r} does not exist; build it with the command" in err
    assert f"python -m data_gen build --out {missing} --num-random 64 --seed 0 --large 0 --num-heldout 0 " \
           "--zoo none" in err
    # another path than the one the config's comment builds gets the generic hint
    code, err = _run(capsys, "--workdir", str(tmp_path / "run"), "--set", f"data.path={missing}")
    assert code == 2 and f"python -m data_gen build --out {missing} --num-random 1000" in err
    assert C.build_command(SMOKE, "data/smoke").startswith("python -m data_gen build --out data/smoke ")
    assert C.build_command(SMOKE, "data/other") is None


def test_workdir_that_is_a_file(tmp_path, data_dir, capsys):
    f = tmp_path / "run"
    f.write_text("notes")
    code, err = _run(capsys, "--workdir", str(f), "--set", f"data.path={data_dir}")
    assert code == 2
    assert "is a file" in err and "give a directory" in err
    assert f.read_text() == "notes"


def test_resume_on_a_missing_workdir_is_an_error(tmp_path, data_dir, capsys):
    missing = tmp_path / "runs" / "typo"
    code, err = _run(capsys, "--workdir", str(missing), "--resume", "--set", f"data.path={data_dir}")
    assert code == 2
    assert "does not exist" in err and "drop --resume" in err and "fix the --workdir path" in err
    assert not missing.exists()


def test_resume_on_a_directory_without_a_run_is_an_error(tmp_path, data_dir, capsys):
    code, err = _run(capsys, "--workdir", str(tmp_path), "--resume", "--set", f"data.path={data_dir}")
    assert code == 2 and "holds no training run" in err and "drop --resume" in err


def test_a_directory_without_a_dataset_is_a_config_error(tmp_path, data_dir, capsys):
    code, err = _run(capsys, "--workdir", str(tmp_path / "run"), "--set", f"data.path={data_dir}")
    assert code == 2
    assert f"config error: cannot read a dataset at {data_dir!r}" in err
    assert f"python -m data_gen build --out {data_dir}" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_dataset_without_labels_says_how_to_make_them(tmp_path, capsys):
    import datasets as hf

    data = str(tmp_path / "data")
    one = hf.Dataset.from_dict({"graph_hash": ["0123456789abcdef"], "num_vertices": [3]})
    hf.DatasetDict({s: one for s in ("train", "validation")}).save_to_disk(data)
    code, err = _run(capsys, "--workdir", str(tmp_path / "run"), "--set", f"data.path={data}")
    assert code == 2
    assert "config error: no labels in" in err and f"python -m data_gen label --data {data}" in err
    assert not (tmp_path / "run" / "checkpoints").exists()
