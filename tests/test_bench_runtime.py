"""``python -m eval.bench_runtime``: every method timed side by side on tiny published tasks,
Jacobians checked against jacrev, ratios from the rows' own times, a report naming the
platform; bad arguments exit 2 with one line before any work."""

from __future__ import annotations

import json
import os

import pytest

from eval import bench_runtime as BR

METHODS = {"jacfwd", "jacrev", "forward", "reverse", "markowitz", "anneal", "auto"}


def test_every_method_is_timed_checked_and_compared_to_jax(tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["--programs", "HumanHeartDipole", "--batches", "1,2", "--repeats", "2",
            "--anneal-s", "0.2", "--agent-s", "0", "--out", str(out)]
    assert BR.main(argv) == 0
    rows = json.loads((out / "report.json").read_text())["rows"]
    for program in ("HumanHeartDipole",):
        for batch in (1, 2):
            mine = {r["method"]: r for r in rows if r["program"] == program and r["batch"] == batch}
            assert set(mine) == METHODS
            assert all(r["status"] == "ok" and r["time_ms"] > 0 and r["compile_s"] > 0 for r in mine.values())
            best_jax = min(mine["jacfwd"]["time_ms"], mine["jacrev"]["time_ms"])
            for r in mine.values():
                assert r["ratio"] == pytest.approx(r["time_ms"] / best_jax)
            for m in ("forward", "reverse", "markowitz", "anneal"):
                assert mine[m]["check"]["ok"] and mine[m]["check"]["reference"] == "jacrev"
                assert mine[m]["mults"] > 0
            # auto ran what it chose at one sample's shapes: JAX's own or an order, checked alike
            assert mine["auto"]["check"]["ok"] and mine["auto"]["order_by"]
            assert (mine["auto"]["mults"] is None) == mine["auto"]["order_by"].startswith("jax.")
            assert mine["jacrev"]["mults"] is None and mine["jacrev"]["check"] is None
    report = (out / "report.md").read_text()
    import jax

    assert f"platform: **{jax.devices()[0].platform}**" in report
    assert "## HumanHeartDipole" in report and "--anneal-s 0.2" in report
    assert "## HumanHeartDipole" in capsys.readouterr().out


def test_the_attention_family_and_families_select_programs():
    names = {e.name for e in BR.select_programs(["attention"])}
    assert {"Encoder", "MultiHeadAttention_h2", "TransformerStack"} <= names
    assert len(BR.select_programs(["published"])) == 10
    assert [e.name for e in BR.select_programs(["RoeFlux_1d", "published"])][0] == "RoeFlux_1d"


def test_a_batch_over_free_memory_is_skipped_not_run(monkeypatch):
    import alphagrad as ag

    monkeypatch.setattr(BR, "_available_bytes", lambda device: 1000)
    settings = BR.Settings(repeats=1, anneal_s=0, agent_s=0)
    prog = BR._program(ag.examples.get("PropaneCombustion"), settings, None)
    import jax

    rows = BR.bench_batch(prog, 4096, settings, jax.devices()[0], prog.deadline)
    assert {r["status"] for r in rows} == {"skipped"} and all("does not fit" in r["reason"] for r in rows)


def test_a_run_cut_short_resumes_where_it_stopped(tmp_path, capsys):
    """--resume keeps the programs the report holds (not measured again) and measures the
    rest; a report made with other settings is refused before any work."""
    out = tmp_path / "r"
    argv = ["--programs", "PropaneCombustion,HumanHeartDipole", "--batches", "1", "--repeats", "1",
            "--anneal-s", "0", "--agent-s", "0", "--no-auto", "--out", str(out)]
    assert BR.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    kept = [r for r in report["rows"] if r["program"] == "PropaneCombustion"]
    cut = dict(report, rows=kept)  # as if the run had been stopped after its first program
    (out / "report.json").write_text(json.dumps(cut))
    assert BR.main(argv + ["--resume"]) == 0
    again = json.loads((out / "report.json").read_text())
    assert [r for r in again["rows"] if r["program"] == "PropaneCombustion"] == kept
    assert {r["method"] for r in again["rows"] if r["program"] == "HumanHeartDipole"} == {
        "jacfwd", "jacrev", "forward", "reverse", "markowitz"}
    assert again["environment"]["started"] == report["environment"]["started"]
    assert len(again["environment"]["resumed"]) == 1 and "resumed" in (out / "report.md").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        BR.main([a if a != "1" else "2" for a in argv] + ["--resume"])
    assert e.value.code == 2 and "other settings" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["--batches", "0,2"], ["--batches", "x"], ["--repeats", "0"], ["--anneal-s", "-1"], ["--agent-s", "nan"],
    ["--time-limit", "0"], ["--programs", "NoSuchProgram"], ["--programs", ","], ["--bogus"], ["--resume"],
])
def test_bad_arguments_exit_2_with_one_line(argv, capsys, monkeypatch):
    monkeypatch.setattr(BR, "run", lambda *a: pytest.fail("work started despite bad arguments"))
    with pytest.raises(SystemExit) as e:
        BR.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error" in err


def test_headline_block_reads_every_published_task_from_the_reports(tmp_path):
    """README's headline block is generated from the committed runtime reports."""
    from eval import headline

    root = os.path.join(os.path.dirname(__file__), os.pardir)
    reports = [os.path.join(root, "eval", "results", d) for d in ("runtime_cpu", "runtime_tpu")]
    text = headline.block(reports, "python -m eval.headline ...")
    from alphagrad.examples import all_examples
    for ex in all_examples():
        if ex.family == "published":
            assert f"| {ex.name} |" in text
    assert "cpu:" in text and "tpu:" in text
    readme = tmp_path / "R.md"
    readme.write_text(f"a\n{headline.START}\nold\n{headline.END}\nb\n")
    assert headline.main(reports + ["--readme", str(readme)]) == 0
    assert "old" not in readme.read_text() and "| RoeFlux_3d |" in readme.read_text()
    assert headline.main(["/nope", "--readme", str(readme)]) == 2
