"""benchmark/sweep.py and benchmark/compare.py on small real runs."""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, read_scalars

SMALL = "--learning-starts 300 --buffer-size 2000 --batch-size 8"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", "sweep.py"), "--out", str(out),
                           "--total-timesteps", "600", "--seeds", "1", "2", "--runs", f"dqn_atari.py {SMALL}",
                           f"dqn_atari_vec.py {SMALL} --envs-count 2 --learn-steps-period 2",
                           "dqn_atari.py --envs-count 3"],  # not a flag of dqn_atari.py: this one fails
                          capture_output=True, text=True, timeout=600)
    return out, proc


def test_sweep_goes_on_past_a_failed_run_and_sums_up(sweep):
    out, proc = sweep
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "[6/6]" in proc.stdout and proc.stdout.count("FAILED (exit 2)") == 2 * 2  # progress line and summary
    assert "4 of 6 runs ended well" in proc.stdout
    assert len(os.listdir(os.path.join(out, "runs"))) == 4


def test_compare_prints_the_table_from_real_events(sweep):
    out, _ = sweep
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", "compare.py"), os.path.join(out, "runs")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| dqn")]
    assert len(rows) == 2  # two settings, each pooling two seeds
    by_name = {row[0].strip(): [cell.strip() for cell in row] for row in rows}
    reference, vectorized = by_name["dqn_atari"], by_name["dqn_atari_vec"]
    assert reference[2] == "600" and reference[4] == "1" and reference[5] == "4" and reference[9] == "2"
    assert reference[6] == str((600 - 300) // 4) and vectorized[6] == str((600 - 300) // 2)
    assert vectorized[4] == "2" and vectorized[5] == "2"
    # the last episodic return: mean ± std over the seeds of each run's mean of its last games
    run_means = []
    for run in sorted(os.listdir(os.path.join(out, "runs"))):
        if "__dqn_atari__" in run:
            returns = read_scalars(os.path.join(out, "runs", run))["charts/episodic_return"][1]
            run_means.append(returns[-100:].mean())
    assert reference[3] == f"{np.mean(run_means):.1f} ± {np.std(run_means):.1f}"


def test_compare_draws_both_curves(sweep, tmp_path):
    pytest.importorskip("matplotlib")
    out, _ = sweep
    png = tmp_path / "curves.png"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", "compare.py"), os.path.join(out, "runs"),
                           "--plot", str(png)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_compare_refuses_a_folder_without_runs(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", "compare.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no run directories" in proc.stderr and "Traceback" not in proc.stderr
