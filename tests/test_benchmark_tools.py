"""The tools: experiments/sweep.py and experiments/compare.py on small real runs, and on hand-made results CSVs; the
speed tools (experiments/) and the developers' checks (benchmark/) on their errors and stops."""

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import types

import numpy as np
import pytest
from conftest import ROOT, assert_refused, descendants, read_scalars, refused_before_this, run_bad

sys.path.insert(0, os.path.join(ROOT, "benchmark"))  # the developers' checks, stopping.py
sys.path.insert(0, os.path.join(ROOT, "experiments"))  # the research tools
import compare  # noqa: E402
import sweep as sweep_tool  # noqa: E402

pytestmark = pytest.mark.tools  # the tools' tests: -m "not tools" leaves them out

SMALL = "--learning-starts 300 --buffer-size 2000 --batch-size 8 --eval-episodes 1"
GOOD = [f"dqn_atari.py {SMALL}", f"dqn_atari_vec.py {SMALL} --envs-count 2 --learn-steps-period 2"]


TOOL_FOLDERS = {name: folder for folder in ("benchmark", "experiments") for name in os.listdir(os.path.join(ROOT, folder))}


def tool_path(tool):
    """A tool's file: experiments/ (the research tools) or benchmark/ (the developers' checks)."""
    return os.path.join(ROOT, TOOL_FOLDERS[tool], tool)


def run_tool(tool, *args, timeout=120):
    return subprocess.run(
        [sys.executable, tool_path(tool), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    proc = run_tool(
        "sweep.py",
        "--out",
        out,  # the CSVs into OUT/results, unless --results-dir names another folder (below)
        "--jobs",
        2,
        "--total-timesteps",
        600,
        "--seeds",
        1,
        2,
        "--runs",
        *GOOD,
        timeout=600,
    )
    return out, proc


def test_sweep_runs_two_at_once_and_sums_up(sweep):
    out, proc = sweep
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[4/4]" in proc.stdout and "4 of 4 runs ended well, 0 skipped, 0 failed" in proc.stdout
    assert proc.stdout.count("log: ") == 2 * 4  # when it starts and when it ends
    runs = sorted(os.listdir(out / "runs"))
    assert len(runs) == 4 and sorted(os.listdir(out / "results")) == sorted(run + ".csv" for run in runs)
    # each run reported as it ends: status, wall time, command, log, its CSV, the log's last line
    assert re.search(
        r"\[3/4\] ok after \d+\.\d min: python dqn_atari_vec.py --learning-starts 300 .* "
        r"--env-id BreakoutNoFrameskip-v4 --total-timesteps 600 --seed 1\n"
        r"    log: \S+03_dqn_atari_vec_seed1.log \| results: \S+.csv \| step 600/600 \|",
        proc.stdout,
    )
    # two at once: the second run started before the first one ended
    assert proc.stdout.index("[2/4] python") < proc.stdout.index("[1/4] ok")


def test_sweep_refuses_an_entry_its_script_refuses_before_any_run(in_tmp, capsys, monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", refused_before_this)
    for bad_entry, error in (
        ("dqn_atari.py --envs-count 3", "unrecognized arguments: --envs-count 3"),  # a flag of another script
        ("ppo_atari.py --num-minibatches 5000", "argument --num-minibatches: must be at most"),  # the script's own check
    ):
        assert_refused(sweep_tool.main, ["--seeds", "1", "2", "--runs", "dqn_atari.py", bad_entry], "--runs", capsys)
        with pytest.raises(SystemExit):
            sweep_tool.main(["--runs", "dqn_atari.py", bad_entry])
        assert f"error: argument --runs: '{bad_entry}': {error}" in capsys.readouterr().err
    assert_refused(sweep_tool.main, ["--runs", "dqn_atari.py --resume runs/x"], "--runs", capsys)
    # the same command twice: its second run could only go on with the first one's run directory
    assert_refused(sweep_tool.main, ["--runs", "ppo_atari.py", " ppo_atari.py "], "--runs", capsys)
    assert os.listdir("sweep/logs") == []  # no run started


def test_the_sweep_checks_its_entries_in_a_process_of_its_own(tmp_path):
    # The checks import the scripts, torch with them (some 200 MB): a sweep of hours should not keep that
    code = (
        f"import sys; sys.path[:0] = {[os.path.join(ROOT, 'experiments'), os.path.join(ROOT, 'benchmark')]!r}; import sweep\n"
        f"try: sweep.main(['--out', {str(tmp_path)!r}, '--runs', 'ppo_atari.py --num-minibatches 5000'])\n"
        "except SystemExit as stop: print(stop.code, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "2 False" and "argument --num-minibatches: must be at most" in proc.stderr, proc


def test_ctrl_c_while_the_entries_are_checked_ends_the_sweep_cleanly_with_no_run(tmp_path):
    # Ctrl-C reaches the whole process group, the checker process too: the sweep takes the stop, no traceback
    sweep = subprocess.Popen(
        [sys.executable, tool_path("sweep.py"), "--out", tmp_path, "--runs", "dqn_atari.py"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def command_line(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read()
        except OSError:  # it has just ended
            return b""

    deadline = time.time() + 60
    while not any(b"spawn_main" in command_line(pid) for pid in descendants(sweep.pid)):
        assert time.time() < deadline and sweep.poll() is None, "no checker process"
        time.sleep(0.05)
    time.sleep(0.3)  # into the checks
    os.killpg(sweep.pid, signal.SIGINT)
    out, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130 and err == "", err[-3000:]
    assert "| dqn_atari.py | 1 | not started |" in out and os.listdir(tmp_path / "logs") == []


def test_a_run_that_ended_without_its_csv_gets_it_in_the_next_sitting(sweep, tmp_path, monkeypatch, capsys):
    # The sweep stopped between a run's end and its CSV: the next sitting writes the CSV from the run (its
    # checkpoint says it ended), rather than start it again or --resume it, which the script refuses
    out = tmp_path / "sweep"
    shutil.copytree(sweep[0], out)
    lost = sorted((out / "results").glob("*__dqn_atari_vec__*.csv"))[0]
    written = lost.read_text()
    lost.unlink()
    monkeypatch.setattr(subprocess, "Popen", refused_before_this)  # no run starts
    flags = ["--out", str(out), "--jobs", "2", "--total-timesteps", "600", "--seeds", "1", "2", "--runs", *GOOD]
    assert sweep_tool.main(flags) == 0
    said = capsys.readouterr().out
    assert said.count(": ended in an earlier sitting; results: ") == 1 and said.count(": skipped, already in ") == 3, said
    assert lost.read_text() == written and "4 of 4 runs ended well" not in said and "1 of 4 runs ended well, 3 skipped" in said
    lost.write_text("")  # one cut short as it was written: left as is, and the sweep goes on
    assert sweep_tool.main(flags) == 0
    assert "(exists already, left as is)" in capsys.readouterr().out and lost.read_text() == ""


def test_sweep_goes_on_past_a_failed_run(monkeypatch, tmp_path, capsys):
    # The children exit at once, the first with status 3, as a run that fails all the same would.
    real_popen = subprocess.Popen
    codes = iter([3, 0])
    monkeypatch.setattr(
        subprocess,
        "Popen",
        lambda command, **kwargs: real_popen([sys.executable, "-c", f"raise SystemExit({next(codes)})"], **kwargs),
    )
    flags = ["--out", str(tmp_path), "--seeds", "1", "2", "--runs", "dqn_atari.py"]
    assert sweep_tool.main(flags) == 1
    out = capsys.readouterr().out
    assert re.search(r"\[1/2\] FAILED \(exit 3\) after .*--seed 1\n    log: \S+01_dqn_atari_seed1.log \| results: - \|", out)
    assert "[2/2] ok after" in out and "1 of 2 runs ended well, 0 skipped, 1 failed" in out


def test_ctrl_c_stops_the_sweep_and_its_run_with_a_checkpoint_and_sums_up_then_it_goes_on(tmp_path):
    """Ctrl-C reaches the sweep alone (each run has a session of its own): it starts no more runs, hands
    the signal on once to the one running, which saves a checkpoint, and sums up; exit status 130.
    The same sweep run again goes on with that run from its checkpoint, in its directory and log."""
    command = [sys.executable, tool_path("sweep.py"), "--out", str(tmp_path), "--seeds", "1", "2"]
    command += ["--total-timesteps", "1000000", "--runs", f"dqn_atari.py {SMALL}"]
    log = tmp_path / "logs" / "01_dqn_atari_seed1.log"

    def sitting(has_begun):  # the sweep, stopped by Ctrl-C once its run's loop has begun
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while not (log.exists() and has_begun(log.read_text())) and time.time() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "Traceback" not in err, err
        return out

    out = sitting(lambda text: sweep_tool.run_dir_in(log))
    assert re.search(
        r"\[1/2\] stopped \(exit 130\) after .*\n.* checkpoint saved; to go on: python dqn_atari.py --resume ", out
    )
    assert re.search(r"^\| dqn_atari.py .* \| 2 \| not started \| 0.0 \| - \|$", out, re.M), out
    assert "0 of 2 runs ended well, 0 skipped, 0 failed, 2 stopped or not started." in out
    (run_dir,) = os.listdir(tmp_path / "runs")
    assert "checkpoint.pt" in os.listdir(tmp_path / "runs" / run_dir)
    first_sitting = log.read_text()
    assert first_sitting.startswith("# python dqn_atari.py --learning-starts 300 ")  # the log names its command

    out = sitting(lambda text: "resumed at step" in text)
    assert re.search(rf"\[1/2\] python dqn_atari.py .*: running, going on from runs/{re.escape(run_dir)}'s checkpoint", out)
    assert os.listdir(tmp_path / "runs") == [run_dir] and os.listdir(tmp_path / "logs") == ["01_dqn_atari_seed1.log"]
    second_sitting = log.read_text().removeprefix(first_sitting)  # written on, not over
    assert re.search(rf"^runs/{re.escape(run_dir)}: resumed at step [\d,]+", second_sitting, re.M), second_sitting


def test_sweep_gives_each_child_one_thread_when_running_several(monkeypatch, tmp_path, capsys):
    # The children here print their environment instead of training: only what sweep.py passes them is tested.
    children = []
    real_popen = subprocess.Popen

    def popen(command, **kwargs):
        children.append(kwargs["env"])
        probe = "import os; print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('MKL_NUM_THREADS'))"
        return real_popen([sys.executable, "-c", probe], **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # not the suite's 1: the children's 1 must come from sweep.py
    monkeypatch.setenv("MKL_NUM_THREADS", "4")
    for jobs, threads in ((2, "1 1"), (1, "4 4")):
        out = tmp_path / f"jobs{jobs}"
        code = sweep_tool.main(
            [
                "--out",
                str(out),
                "--results-dir",
                str(out / "results"),
                "--jobs",
                str(jobs),
                "--seeds",
                "1",
                "2",
                "--runs",
                "dqn_atari.py",
            ]
        )
        assert code == 0
        logs = [open(out / "logs" / name).read().strip().splitlines()[-1] for name in sorted(os.listdir(out / "logs"))]
        assert logs == [threads] * 2
        if jobs == 1:  # --jobs 1 keeps the thread count it was given, torch's own by default
            assert children[-2:] == [None, None]
    assert "2 of 2 runs ended well" in capsys.readouterr().out


def test_a_run_with_no_checkpoint_starts_anew_beside_its_earlier_log(monkeypatch, tmp_path, capsys):
    # The children print a line instead of training: they make no run directory, so none can go on.
    real_popen = subprocess.Popen
    monkeypatch.setattr(
        subprocess, "Popen", lambda command, **kwargs: real_popen([sys.executable, "-c", "print(2)"], **kwargs)
    )
    flags = ["--out", str(tmp_path), "--results-dir", str(tmp_path / "results"), "--runs", "dqn_atari.py"]
    assert sweep_tool.main(flags) == 0
    first = (tmp_path / "logs" / "01_dqn_atari_seed1.log").read_text()
    assert first.startswith("# python dqn_atari.py --env-id BreakoutNoFrameskip-v4 ") and first.endswith("\n2\n")
    assert sweep_tool.main(flags) == 0
    assert "going on from" not in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path / "logs")) == ["01_dqn_atari_seed1.log", "01_dqn_atari_seed1_2.log"]
    assert (tmp_path / "logs" / "01_dqn_atari_seed1.log").read_text() == first


def test_sweep_finds_a_run_directory_whose_name_has_spaces_and_colons(tmp_path):
    """--exp-name may hold spaces and colons (the scripts take them): the run is still found in its log."""
    log = tmp_path / "run.log"
    log.write_text("runs/BreakoutNoFrameskip-v4__seed notes: 2__1__1796347714: Breakout")  # the line half written
    assert sweep_tool.run_dir_in(log) is None
    log.write_text(log.read_text() + "NoFrameskip-v4, 600 steps on cpu\nstep 600/600 | 145 steps/s | 0h00m left\n")
    assert sweep_tool.run_dir_in(log) == "runs/BreakoutNoFrameskip-v4__seed notes: 2__1__1796347714"


def test_sweep_refuses_no_jobs(in_tmp, capsys):
    assert_refused(sweep_tool.main, ["--jobs", "0", "--runs", "dqn_atari.py"], "--jobs", capsys)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        sweep_tool.main(["--jobs", "-2", "--runs", "dqn_atari.py"])
    assert "1 or more" in capsys.readouterr().err


def test_sweep_refuses_a_system_without_signal_masks_before_making_anything(in_tmp, capsys, monkeypatch):
    """Windows has no pthread_sigmask (nor the signals the sweep hands its runs): one line, exit 2, no folder."""
    monkeypatch.delattr(signal, "pthread_sigmask")
    with pytest.raises(SystemExit) as stopped:
        sweep_tool.main(["--out", "out", "--runs", "dqn_atari.py"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("sweep.py: needs Linux or macOS")
    assert not os.path.exists("out")


def test_the_kill_and_memory_tools_refuse_windows_in_one_line(in_tmp, capsys, monkeypatch):
    """Windows has no SIGKILL, no process groups, no getrusage: each tool says so, exit 2, before any run."""
    import checkpoint_pause
    import mp_kill
    import resume_kill

    monkeypatch.setattr(subprocess, "Popen", not_now)  # no run of a script starts
    monkeypatch.delattr(signal, "SIGKILL")
    monkeypatch.delattr(os, "killpg")
    monkeypatch.setitem(sys.modules, "resource", None)  # import resource: ImportError
    monkeypatch.setattr(sys, "argv", ["mp_kill.py"])  # mp_kill reads its flags from the command line
    for tool, why in [
        (mp_kill, "mp_kill.py: needs Linux or macOS"),
        (resume_kill, "resume_kill.py: needs Linux or macOS"),
        (checkpoint_pause, "checkpoint_pause.py: needs Linux or macOS"),
    ]:
        with pytest.raises(SystemExit) as stopped:
            tool.main(*([] if tool is mp_kill else [[]]))
        assert stopped.value.code == 2
        assert capsys.readouterr().err.startswith(why)
    assert os.listdir(in_tmp) == []


def test_sweep_skips_runs_already_in_the_results_folder(sweep):
    out, _ = sweep
    before = {name: (out / "results" / name).read_text() for name in os.listdir(out / "results")}
    proc = run_tool(
        "sweep.py",
        "--out",
        out,
        "--results-dir",
        out / "results",
        "--total-timesteps",
        600,
        "--seeds",
        2,
        1,
        "--runs",
        GOOD[0],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("skipped, already in") == 2 and "0 of 2 runs ended well, 2 skipped" in proc.stdout
    assert len(os.listdir(out / "runs")) == 4
    assert {name: (out / "results" / name).read_text() for name in os.listdir(out / "results")} == before


def test_results_csv_holds_the_runs_games_and_gives_the_same_table(sweep, tmp_path):
    out, _ = sweep
    for name in os.listdir(out / "runs"):
        lines = (out / "results" / f"{name}.csv").read_text().splitlines()
        seed = name.split("__")[2]
        assert lines[0].startswith("# command: python dqn_atari") and lines[0].endswith(
            f"--env-id BreakoutNoFrameskip-v4 --total-timesteps 600 --seed {seed}"
        )
        assert f"# seed: {seed}" in lines and "# env_id: BreakoutNoFrameskip-v4" in lines
        csv, events = compare.read_csv(out / "results" / f"{name}.csv"), read_scalars(str(out / "runs" / name))
        steps, returns = events["charts/episodic_return"]
        assert csv["curve"][0] == list(steps) and csv["curve"][2] == list(returns) and len(returns) >= 1
        assert np.all(np.diff(csv["curve"][1]) >= 0) and csv["steps"] == 600
        assert {k: v for k, v in csv.items() if k != "command"} == {
            k: v for k, v in compare.read_run(out / "runs" / name).items() if k != "command"
        }
    # the same table from the CSVs as from the run directories, by the command line
    by_dirs, by_csvs, both = (
        run_tool("compare.py", *paths, "--reach", 1, "--last", 2)
        for paths in ([out / "runs"], [out / "results"], [out / "runs", out / "results"])
    )
    assert by_dirs.returncode == 0 and "| dqn_atari |" in by_dirs.stdout, by_dirs.stderr
    assert by_csvs.stdout == by_dirs.stdout and both.stdout == by_dirs.stdout  # a run found twice counts once
    # --export writes the same CSVs from the run directories, and overwrites none
    exported = run_tool("compare.py", "--export", tmp_path, out / "runs")
    assert exported.returncode == 0 and exported.stdout.count("written from") == 4
    assert run_tool("compare.py", tmp_path, "--reach", 1, "--last", 2).stdout == by_dirs.stdout
    (tmp_path / os.listdir(tmp_path)[0]).write_text("kept")
    again = run_tool("compare.py", "--export", tmp_path, out / "runs")
    assert again.stdout.count("exists already, left as is") == 4 and "kept" in [
        (tmp_path / name).read_text() for name in os.listdir(tmp_path)
    ]
    with pytest.raises(FileExistsError):
        compare.write_csv(out / "runs" / name, out / "results" / f"{name}.csv", "python dqn_atari.py")


def test_compare_prints_the_table_from_real_events(sweep):
    out, _ = sweep
    proc = run_tool("compare.py", out / "runs")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| dqn")]
    assert len(rows) == 2  # two settings, each pooling two seeds
    by_name = {row[0].strip(): [cell.strip() for cell in row] for row in rows}
    reference, vectorized = by_name["dqn_atari"], by_name["dqn_atari_vec"]
    assert reference[2] == "600" and reference[3] == "2" and reference[4] == "1" and reference[5] == "4"
    assert reference[6] == str((600 - 300) // 4) and vectorized[6] == str((600 - 300) // 2)
    assert vectorized[4] == "2" and vectorized[5] == "2"
    # the last episodic return: mean ± std over the seeds of each run's mean of its last games
    run_means = []
    for run in sorted(os.listdir(out / "runs")):
        if "__dqn_atari__" in run:
            returns = read_scalars(str(out / "runs" / run))["charts/episodic_return"][1]
            run_means.append(returns[-100:].mean())
    assert reference[7] == f"{np.mean(run_means):.1f} ± {np.std(run_means):.1f}"


def test_updates_at_gives_the_updates_the_runs_logged(sweep):
    # the real scripts' charts/updates, logged with the step it was made by: the rule of updates_at
    out, _ = sweep
    for name in os.listdir(out / "runs"):
        steps, updates = read_scalars(str(out / "runs" / name))["charts/updates"]
        params = compare.read_run(out / "runs" / name)["params"]
        assert list(compare.updates_at(params, steps)) == list(updates) and updates[-1] > 0


def test_updates_at_counts_from_learning_starts_one_per_period():
    params = {"exp_name": "dqn_atari_vec", "learning_starts": "300", "learn_steps_period": "4"}
    steps = [0, 299, 300, 303, 304, 307, 308, 600]
    assert list(compare.updates_at(params, steps)) == [0, 0, 0, 0, 1, 1, 2, 75]
    assert list(compare.updates_at({**params, "learn_steps_period": "1"}, [300, 301, 1000])) == [0, 1, 700]
    assert compare.updates_at({"exp_name": "ppo_atari", "envs_count": "8"}, steps) is None


class FakeAxes:
    """Records what compare.plot draws on one panel."""

    def __init__(self):
        self.lines, self.shaded, self.labels, self.hlines = [], [], {}, []
        self.xaxis = types.SimpleNamespace(set_major_formatter=lambda formatter: None)

    def plot(self, x, y, **kwargs):
        self.lines.append((list(x), list(y), kwargs["color"], kwargs.get("label")))

    def fill_between(self, x, low, high, **kwargs):
        self.shaded.append((list(x), list(low), list(high), kwargs["color"]))

    def set(self, **kwargs):
        self.labels.update(kwargs)

    def axhline(self, y, **kwargs):
        self.hlines.append(y)

    def legend(self, **kwargs):
        self.labels["legend"] = kwargs.get("title")


def fake_pyplot(panels):
    """A pyplot whose subplots records the panels: what plot draws is tested without matplotlib."""

    def subplots(rows, cols, figsize, squeeze):
        row = [FakeAxes() for _ in range(cols)]
        panels.extend(row)
        figure = types.SimpleNamespace(
            tight_layout=lambda **kwargs: None, transFigure=None, savefig=lambda path, dpi: open(path, "w").close()
        )
        return figure, [row]

    return types.SimpleNamespace(subplots=subplots)


def test_seeds_mean_interpolates_onto_the_steps_all_seeds_share():
    # seed 1 has values at 200, 300, 400; seed 2 at 250, 350, 450: both cover 250-400
    one, two = (np.array([200, 300, 400]), np.array([1.0, 3.0, 5.0])), (np.array([250, 350, 450]), np.array([4.0, 6.0, 8.0]))
    grid, mean, low, high = compare.seeds_mean([one, two])
    assert list(grid) == [250, 300, 350, 400]  # every step either seed has, where both have a value
    # seed 1 at 250 and 350: 2 and 4 (halfway); seed 2 at 300 and 400: 5 and 7
    assert list(mean) == [3.0, 4.0, 5.0, 6.0] and list(low) == [2.0, 3.0, 4.0, 5.0] and list(high) == [4.0, 5.0, 6.0, 7.0]
    grid, mean, low, high = compare.seeds_mean([one])  # one seed: its own curve, no spread
    assert list(grid) == [200, 300, 400] and list(mean) == list(low) == list(high) == [1.0, 3.0, 5.0]
    assert compare.seeds_mean([one, (np.array([500, 600]), np.array([1.0, 2.0]))]) is None  # no step in common


def test_compare_plot_draws_one_line_per_setting_the_mean_of_its_seeds_and_their_range(tmp_path):
    # dqn_atari, 2 seeds, smoothed over 2 games: seed 1 1, 3, 5 at steps 200, 300, 400; seed 2 4, 6, 8 at 250, 350, 450
    hand_made(
        tmp_path,
        "a1",
        [(100, 0, 1), (200, 2, 2), (300, 4, 3), (400, 6, 4)],
        seed=1,
        learning_starts=100,
        learn_steps_period=50,
    )
    hand_made(
        tmp_path,
        "a2",
        [(150, 4, 1), (250, 4, 2), (350, 8, 3), (450, 8, 4)],
        seed=2,
        learning_starts=100,
        learn_steps_period=50,
    )
    hand_made(
        tmp_path,
        "b1",
        [(100, 1, 1), (300, 3, 2), (500, 5, 3)],
        exp_name="dqn_atari_vec",
        envs_count=4,
        learning_starts=100,
        learn_steps_period=100,
    )
    hand_made(tmp_path, "c1", [(100, 2, 1), (200, 2, 2), (300, 8, 3)], exp_name="ppo_atari", envs_count=8)
    hand_made(tmp_path, "c2", [(100, 0, 1), (200, 2, 2), (300, 4, 3)], exp_name="ppo_atari", envs_count=8, seed=2)
    runs = [compare.read_csv(tmp_path / f"{name}.csv") for name in ("a1", "a2", "b1", "c1", "c2")]
    panels = []
    left_out = compare.plot(runs, tmp_path / "curves.png", fake_pyplot(panels), reach=3, window=2)
    assert left_out == [] and (tmp_path / "curves.png").exists()
    assert len(panels) == 2  # no wall-clock panel
    by_steps, by_updates = panels
    # one line per setting, not per seed: dqn_atari, dqn_atari_vec, ppo_atari
    assert [label for *_, label in by_steps.lines] == [
        "dqn_atari (1 env, K=50), 2 seeds",
        "dqn_atari_vec (4 envs, K=100), 1 seed",
        "ppo_atari (8 envs), 2 seeds",
    ]
    (a_x, a_y, a_color, _), (b_x, b_y, b_color, _), (c_x, c_y, c_color, _) = by_steps.lines
    assert a_x == [250, 300, 350, 400] and a_y == pytest.approx([3.0, 4.0, 5.0, 6.0])  # the mean of the two seeds
    assert b_x == [300, 500] and b_y == pytest.approx([2.0, 4.0])  # one seed: its own smoothed curve
    assert c_x == [200, 300] and c_y == pytest.approx([1.5, 4.0])  # seeds 2, 5 and 1, 3: (2 + 1) / 2 and (5 + 3) / 2
    assert len({a_color, b_color, c_color}) == 3
    # the seeds' range shaded, in the line's colour; nothing shaded for a single seed
    (sa_x, sa_low, sa_high, sa_color), (sc_x, sc_low, sc_high, sc_color) = by_steps.shaded
    assert (sa_x, sa_low, sa_high, sa_color) == (a_x, [2.0, 3.0, 4.0, 5.0], [4.0, 5.0, 6.0, 7.0], a_color)
    assert (sc_x, sc_low, sc_high, sc_color) == (c_x, [1.0, 3.0], [2.0, 5.0], c_color)
    # against updates: the DQN settings only, at the updates made by each step, the same means
    assert [(x, color) for x, _, color, _ in by_updates.lines] == [([3, 4, 5, 6], a_color), ([2, 4], b_color)]
    assert by_updates.lines[0][1] == a_y and by_updates.lines[1][1] == b_y
    assert by_updates.shaded == [([3, 4, 5, 6], sa_low, sa_high, a_color)]
    assert by_updates.labels["xlabel"] == "gradient updates" and "ppo_atari not shown" in by_updates.labels["title"]
    assert by_steps.labels["xlabel"] == "environment steps" and "min to max" in by_steps.labels["legend"]
    assert by_steps.hlines == by_updates.hlines == [3]
    # a setting whose seeds share no step is named, not drawn; PPO alone: one panel
    hand_made(tmp_path, "c3", [(1000, 0, 1), (1100, 4, 2)], exp_name="ppo_atari", envs_count=8, seed=3)
    panels.clear()
    runs = [compare.read_csv(tmp_path / f"{name}.csv") for name in ("c1", "c2", "c3")]
    assert compare.plot(runs, tmp_path / "ppo.png", fake_pyplot(panels), window=2) == ["ppo_atari"]
    assert len(panels) == 1 and panels[0].lines == []


def test_compare_plot_with_wall_clock_draws_the_second_panel_against_minutes(tmp_path):
    # pqn_atari, 2 seeds, smoothed over 2 games: seed 1 1, 3, 5 at minutes 2, 4, 6; seed 2 3, 5, 7 at minutes 3, 5, 7
    hand_made(tmp_path, "p1", [(100, 0, 60), (200, 2, 120), (300, 4, 240), (400, 6, 360)], exp_name="pqn_atari")
    hand_made(tmp_path, "p2", [(100, 2, 60), (200, 4, 180), (300, 6, 300), (400, 8, 420)], exp_name="pqn_atari", seed=2)
    hand_made(tmp_path, "d1", [(100, 1, 30), (200, 3, 90)], learning_starts=50)  # dqn_atari: 2 at 1.5 minutes
    runs = [compare.read_csv(tmp_path / f"{name}.csv") for name in ("p1", "p2", "d1")]
    panels = []
    assert compare.plot(runs, tmp_path / "time.png", fake_pyplot(panels), reach=4, window=2, wall_clock=True) == []
    assert len(panels) == 2  # steps and minutes; no panel of updates
    by_steps, by_minutes = panels
    assert by_minutes.labels["xlabel"].startswith("wall-clock minutes") and by_minutes.hlines == [4]
    (d_x, d_y, d_color, _), (p_x, p_y, p_color, _) = by_minutes.lines
    assert (d_x, d_y) == ([1.5], [2.0])
    # minutes both seeds cover, 3-6: seed 1 interpolated 2, 3, 4, 5; seed 2 3, 4, 5, 6
    assert p_x == [3.0, 4.0, 5.0, 6.0] and p_y == pytest.approx([2.5, 3.5, 4.5, 5.5])
    assert by_minutes.shaded == [(p_x, [2.0, 3.0, 4.0, 5.0], [3.0, 4.0, 5.0, 6.0], p_color)]
    assert [color for *_, color, _ in by_steps.lines] == [d_color, p_color]  # a setting's colour in both panels
    assert by_steps.lines[1][0] == [200, 300, 400] and by_steps.lines[1][1] == pytest.approx([2.0, 4.0, 6.0])
    # --wall-clock draws into --plot's file: alone, it is refused
    proc = run_tool("compare.py", tmp_path, "--wall-clock")
    assert proc.returncode == 2 and "--wall-clock" in proc.stderr and "Traceback" not in proc.stderr


def hand_made(folder, name, games, steps=4000, **flags):
    """A results CSV as experiments/results/README.md describes it; games: (step, return, seconds)."""
    params = {"exp_name": "dqn_atari", "seed": "1", "env_id": "PongNoFrameskip-v4", **{k: str(v) for k, v in flags.items()}}
    if params["exp_name"].startswith("dqn"):  # the flags of the DQN scripts only
        params = {"learning_starts": "80000", "learn_steps_period": "4", **params}
    rows = "".join(f"{step},{value},{seconds}\n" for step, value, seconds in games)
    (folder / f"{name}.csv").write_text(
        f"# command: python {params['exp_name']}.py --seed {params['seed']}\n# script: {params['exp_name']}.py\n"
        f"# env_id: {params['env_id']}\n# seed: {params['seed']}\n# steps: {steps}\n# seconds: 600.0\n# updates: 500\n"
        f"# hyperparameters: {json.dumps(params)}\nstep,return,seconds\n{rows}"
    )


def test_compare_leaves_out_the_runs_that_watched_a_saved_model(tmp_path, capsys):
    """--eval-model makes a run directory of its own beside the training runs: a few games, nothing learnt."""
    from torch.utils.tensorboard import SummaryWriter

    for name, eval_model in [("train", "None"), ("train_eval", "runs/train/dqn_atari.pt")]:
        writer = SummaryWriter(tmp_path / "runs" / name)
        table = f"|param|value|\n|-|-|\n|exp_name|dqn_atari|\n|env_id|PongNoFrameskip-v4|\n|seed|1|\n|eval_model|{eval_model}|"
        writer.add_text("hyperparameters", table, 0)
        writer.add_scalar("charts/episodic_return", 3.0, 100)
        writer.close()
    assert compare.main([str(tmp_path / "runs")]) is None
    out = capsys.readouterr().out
    assert "left out: train_eval, a run of --eval-model" in out
    assert len([line for line in out.splitlines() if line.startswith("| dqn_atari")]) == 1  # the training run alone
    assert compare.main(["--export", str(tmp_path / "csv"), str(tmp_path / "runs")]) == 0
    assert os.listdir(tmp_path / "csv") == ["train.csv"]
    assert refused(compare.main, [str(tmp_path / "runs" / "train_eval")], capsys).startswith(
        "argument RUN: only runs of --eval-model under"
    )


def test_compare_leaves_out_the_time_a_resumed_run_was_stopped(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    table = "|param|value|\n|-|-|\n|exp_name|dqn_atari|\n|env_id|PongNoFrameskip-v4|\n|seed|1|"
    first = SummaryWriter(tmp_path)  # started at second 1000; a game at minute 1; its last event at 90 s
    first.add_text("hyperparameters", table, 0, walltime=1000.0)
    first.add_scalar("charts/episodic_return", 1.0, 100, walltime=1060.0)
    first.add_scalar("charts/SPS", 5.0, 150, walltime=1090.0)
    first.close()
    second = SummaryWriter(tmp_path, purge_step=151)  # resumed over an hour later, as the scripts write it
    second.add_text("hyperparameters", table, 151, walltime=5000.0)
    second.add_scalar("charts/episodic_return", 2.0, 200, walltime=5030.0)
    second.close()
    run = compare.read_run(tmp_path)
    assert run["seconds"] == 120.0 and run["curve"] == ([100, 200], [60.0, 120.0], [1.0, 2.0]), run
    # resumed again and stopped before it logged a thing, then once more: none of that sitting counted (nothing
    # shows how long it ran), the last 20 s are
    for start, last in ((6000.0, None), (7000.0, 7020.0)):
        writer = SummaryWriter(tmp_path, purge_step=201)
        writer.add_text("hyperparameters", table, 201, walltime=start)
        if last:
            writer.add_scalar("charts/episodic_return", 3.0, 300, walltime=last)
        writer.close()
    run = compare.read_run(tmp_path)
    assert run["seconds"] == 140.0 and run["curve"][1] == [60.0, 120.0, 140.0], run


def test_compare_shows_no_rate_for_a_run_stopped_before_its_first_second(tmp_path):
    hand_made(tmp_path, "a1", [], steps=0)
    run = compare.read_csv(tmp_path / "a1.csv") | {"seconds": 0.0}  # as read_run gives a run stopped at once
    cells = [cell.strip() for cell in compare.table([run]).splitlines()[2].split("|")[1:-1]]
    assert cells[7:9] == ["no game ended", "-"], cells


def test_compare_reach_gives_steps_and_minutes_over_the_seeds_that_got_there(tmp_path):
    # --last 2: the mean of two games in a row must reach 10; one game alone does not count
    hand_made(tmp_path, "a1", [(1000, 0, 60), (2000, 10, 120), (3000, 10, 180), (4000, 0, 240)], seed=1)  # 3000, 3.0 min
    hand_made(tmp_path, "a2", [(1000, 10, 30), (2000, 10, 120)], seed=2)  # 2000, 2.0 min
    hand_made(tmp_path, "a3", [(1000, 30, 30), (2000, -30, 60), (3000, 9, 90)], seed=3)  # not reached
    hand_made(tmp_path, "b1", [(1000, 30, 30)], learning_starts=20000)  # not reached: fewer than 2 games
    hand_made(tmp_path, "c1", [(1000, 11, 30), (2000, 9, 240)], exp_name="ppo_atari", envs_count=8)  # 2000, 4.0 min
    hand_made(tmp_path, "d1", [(3000, 12, 60), (5000, 12, 90)], learning_starts=1000)  # 5000: (5000 - 1000) // 4 updates
    proc = run_tool("compare.py", tmp_path, "--reach", 10, "--last", 2)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [cell.strip() for cell in lines[0].split("|")[1:-1]][-2:] == ["steps to 10", "minutes to 10"]
    cells = {row[0]: row for row in ([cell.strip() for cell in line.split("|")[1:-1]] for line in lines[2:])}
    assert sorted(cells) == [
        "dqn_atari --learning-starts 1000",
        "dqn_atari --learning-starts 20000",
        "dqn_atari --learning-starts 80000",
        "ppo_atari",
    ]
    assert cells["dqn_atari --learning-starts 80000"][-2:] == ["2/3 reached: 2,500 (0 updates)", "2/3 reached: 2.5"]
    assert cells["dqn_atari --learning-starts 80000"][3] == "3"  # seeds
    assert cells["dqn_atari --learning-starts 20000"][-2:] == ["not reached", "not reached"]
    assert cells["dqn_atari --learning-starts 1000"][-2:] == ["5,000 (1,000 updates)", "1.5"]
    assert cells["ppo_atari"][-2:] == ["2,000", "4.0"] and cells["ppo_atari"][4] == "8"  # no updates rule: steps only
    assert cells["ppo_atari"][7] == "10.0" and cells["ppo_atari"][8] == f"{4000 / 600:,.0f}"
    assert "minutes to" not in run_tool("compare.py", tmp_path).stdout


def test_compare_pools_runs_that_differ_only_in_saving_flags(tmp_path):
    games = [(1000, 2, 60), (2000, 4, 120)]
    hand_made(tmp_path, "a1", games, seed=1)  # from before --save-every existed
    hand_made(tmp_path, "a2", games, seed=2, save_every=100000, save_model=True, eval_episodes=10)
    hand_made(tmp_path, "a3", games, seed=3, save_every=50000, capture_video=False)
    hand_made(tmp_path, "a4", games, seed=4, save_every=50000, track=True, wandb_project_name="cleanRL", wandb_entity=None)
    hand_made(tmp_path, "b1", games, seed=1, save_every=100000, learning_rate=0.001)  # another setting
    proc = run_tool("compare.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    cells = {
        row[0]: row for row in ([cell.strip() for cell in line.split("|")[1:-1]] for line in proc.stdout.splitlines()[2:])
    }
    assert sorted(cells) == ["dqn_atari", "dqn_atari --learning-rate 0.001"]  # no saving flag in a label
    assert cells["dqn_atari"][3] == "4" and cells["dqn_atari --learning-rate 0.001"][3] == "1"


def test_compare_pools_runs_that_passed_their_total_by_a_few_steps(tmp_path):
    """With several environments a run stops at the first vector step that reaches its total; a
    run stopped early by Ctrl-C is another setting."""
    games = [(1000, 2, 60), (2000, 4, 120)]
    for seed, steps in [(1, 4000), (2, 4003), (3, 4007)]:
        hand_made(tmp_path, f"a{seed}", games, steps=steps, seed=seed, total_timesteps=4000)
    hand_made(tmp_path, "a4", games, steps=2500, seed=4, total_timesteps=4000)
    proc = run_tool("compare.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in proc.stdout.splitlines()[2:]]
    assert sorted((row[2], row[3]) for row in rows) == [("2,500", "1"), ("4,000", "3")]


def test_compare_draws_the_curves_with_matplotlib(sweep, tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, _ = sweep
    png = tmp_path / "curves.png"
    proc = run_tool("compare.py", out / "results", "--plot", png, "--reach", 1)
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    width, height = struct.unpack(">II", png.read_bytes()[16:24])  # the PNG header's size
    assert 2 * height < width < 3 * height  # two panels side by side: steps and updates
    # drawn again under the same name: the earlier figure is kept, the new one written beside it
    first = png.read_bytes()
    proc = run_tool("compare.py", out / "results", "--plot", png, "--reach", 1)
    assert proc.returncode == 0 and f"learning curves written to {tmp_path / 'curves_2.png'}" in proc.stdout, proc.stdout
    assert png.read_bytes() == first and (tmp_path / "curves_2.png").stat().st_size > 10_000
    # on real matplotlib: per panel one line per setting (and --reach's), each with its seeds' range shaded
    games = [(1000 + 100 * i, i % 5, i) for i in range(30)]
    for seed in (1, 2):
        hand_made(
            tmp_path,
            f"a{seed}",
            [(step + 10 * seed, value + seed, t) for step, value, t in games],
            seed=seed,
            learning_starts=1000,
        )
        hand_made(tmp_path, f"b{seed}", games, exp_name="dqn_atari_vec", envs_count=8, seed=seed, learning_starts=1000)
    runs = [compare.read_csv(tmp_path / f"{name}.csv") for name in ("a1", "a2", "b1", "b2")]
    figure_path = tmp_path / "hand_made.png"
    assert compare.plot(runs, figure_path, plt, reach=2, window=10) == [] and figure_path.exists()
    by_steps, by_updates = plt.gcf().axes
    for axes in (by_steps, by_updates):
        assert len(axes.lines) == 3 and len(axes.collections) == 2
    assert [text.get_text() for text in by_steps.get_legend().get_texts()] == [
        "dqn_atari (1 env, K=4), 2 seeds",
        "dqn_atari_vec (8 envs, K=4), 2 seeds",
    ]
    plt.gcf().canvas.draw()
    legend = by_steps.get_legend().get_window_extent()
    assert all(legend.y1 < axes.get_window_extent().y0 for axes in (by_steps, by_updates))  # below the panels: on no curve
    plt.close("all")


def test_compare_refuses_a_folder_without_runs_and_a_foreign_csv(tmp_path):
    proc = run_tool("compare.py", tmp_path)
    assert proc.returncode == 2 and "no run directories" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "prices.csv").write_text("day,price\n1,2.5\n")
    proc = run_tool("compare.py", tmp_path)
    assert proc.returncode == 2 and "is not a results CSV" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_tool("compare.py", tmp_path, "--last", 0)
    assert proc.returncode == 2 and "argument --last" in proc.stderr


def test_compare_refuses_a_csv_whose_hyperparameters_are_no_table(tmp_path, capsys):
    hand_made(tmp_path, "run", [(100, 1.0, 10.0)])
    path = tmp_path / "run.csv"
    path.write_text(re.sub(r"# hyperparameters: .*", "# hyperparameters: []", path.read_text()))
    assert refused(compare.main, [str(path)], capsys) == (
        f"argument RUN: {path} is not a results CSV (see experiments/results/README.md): "
        "ValueError('its hyperparameters line holds no table of flags')"
    )


def test_compare_refuses_another_programs_events_and_an_empty_events_file(tmp_path, capsys):
    """TensorBoard events no script of this project wrote (no hyperparameters table), or an events file
    of 0 bytes: one error line naming the folder, for the table and for --export, and no CSV written."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path / "other"))
    writer.add_event(Event(wall_time=1.0, step=1, summary=Summary(value=[Summary.Value(tag="loss", simple_value=1.0)])))
    writer.close()
    os.makedirs(tmp_path / "empty")
    (tmp_path / "empty" / "events.out.tfevents.1.host").write_bytes(b"")
    for folder in ["other", "empty"]:
        for export in ([], ["--export", str(tmp_path / "csvs")]):
            with pytest.raises(SystemExit) as exit_info:
                compare.main([str(tmp_path / folder), *export])
            err = capsys.readouterr().err
            assert exit_info.value.code == 2 and "Traceback" not in err, err
            assert f"argument RUN: {tmp_path / folder} is not a run of these scripts: its TensorBoard events hold no" in err
    assert os.listdir(tmp_path / "csvs") == []


def test_cleanrl_speed_refuses_a_missing_python_or_script_and_reads_a_runs_rate(tmp_path):
    proc = run_tool("cleanrl_speed.py", "--cleanrl-python", tmp_path / "no_python", "--cleanrl-script", tmp_path / "no.py")
    assert proc.returncode == 2 and "argument --cleanrl-python: no file" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_tool("cleanrl_speed.py", "--cleanrl-python", sys.executable, "--cleanrl-script", tmp_path / "no.py")
    assert proc.returncode == 2 and "argument --cleanrl-script: no file" in proc.stderr
    # a run's rate: the steps between its second and last losses/td_loss over their wall-clock seconds
    import cleanrl_speed  # from experiments/, on the path (above)
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path / "runs" / "a_run"))
    for step, wall_time in [(1024, 100.0), (2048, 103.0), (3072, 105.0), (4096, 107.0)]:
        summary = Summary(value=[Summary.Value(tag="losses/td_loss", simple_value=0.1)])
        writer.add_event(Event(wall_time=wall_time, step=step, summary=summary))
    writer.close()
    assert cleanrl_speed.steps_per_second(str(tmp_path)) == pytest.approx((4096 - 2048) / (107.0 - 103.0))


def test_cleanrl_speed_refuses_what_would_fail_after_a_run_and_keeps_earlier_logs(in_tmp, monkeypatch, capsys):
    import cleanrl_speed  # from experiments/, on the path (above)

    (in_tmp / "plain.py").write_text("")  # a file, but no program
    (in_tmp / "cleanrl_speed_logs").mkdir()
    (in_tmp / "cleanrl_speed_logs" / "round1_0.log").write_text("an earlier sitting's")
    both = ["--cleanrl-python", sys.executable, "--cleanrl-script", "plain.py"]
    for argv, message in (
        (
            ["--cleanrl-python", "plain.py", "--cleanrl-script", "plain.py"],
            "argument --cleanrl-python: plain.py is not a program",
        ),
        ([*both, "--total-timesteps", "3071"], "argument --total-timesteps: must be at least 3,072"),
        ([*both, "--logs", "plain.py/logs"], "argument --logs: cannot make the folder plain.py/logs: Not a directory"),
    ):
        monkeypatch.setattr(sys, "argv", ["cleanrl_speed.py", *argv])
        assert refused(lambda _: cleanrl_speed.main(), None, capsys).startswith(message), argv
    monkeypatch.setattr(cleanrl_speed, "run", lambda argv, log_path: open(log_path, "w").write("now") and 100.0)
    monkeypatch.setattr(sys, "argv", ["cleanrl_speed.py", *both, "--rounds", "1"])
    cleanrl_speed.main()
    assert (in_tmp / "cleanrl_speed_logs" / "round1_0.log").read_text() == "an earlier sitting's"
    assert sorted(os.listdir(in_tmp / "cleanrl_speed_logs_2")) == ["round1_0.log", "round1_1.log"]
    assert "ratio 1.00" in capsys.readouterr().out


def test_dqn_speed_refuses_a_thread_count_below_one_and_splits_the_loops_time_into_its_parts():
    proc = run_tool("dqn_speed.py", "--threads-counts", 2, 0)
    assert proc.returncode == 2 and "argument --threads-counts" in proc.stderr and "Traceback" not in proc.stderr
    import dqn_speed  # from experiments/, on the path (above)

    built = {"update": 20.0, "+ 4 acting passes": 23.5, "+ 4 game steps": 26.0}
    assert dqn_speed.each_part(built) == pytest.approx({"update": 20.0, "+ 4 acting passes": 3.5, "+ 4 game steps": 2.5})


def test_dqn_speed_refuses_a_bad_setting_before_any_run_and_gives_each_500_updates(in_tmp, monkeypatch, capsys):
    """--settings (issue 59: fewer, larger updates against dqn_atari.py's K=4 batch 32): each entry is a DQN script
    and flags it takes, checked before the first measurement; each is timed over 500 updates at least."""
    vec = "dqn_atari_vec.py --envs-count 8 --learn-steps-period 32 --batch-size 256"
    mp = "dqn_atari_mp.py --workers-count 2 --learn-steps-period 16 --batch-size 128"
    assert run_bad("experiments/dqn_speed.py", ["--settings", vec, "ppo_atari.py --envs-count 8"], in_tmp) == (
        "dqn_speed.py: error: argument --settings: 'ppo_atari.py --envs-count 8' does not start with a DQN script: "
        "dqn_atari.py, dqn_atari_vec.py, dqn_atari_mp.py"
    )
    import dqn_speed

    monkeypatch.setattr(subprocess, "Popen", not_now)  # no run of a script starts (subprocess.run too)
    monkeypatch.setattr(dqn_speed, "torch_default_threads", not_now)  # the first step after the checks
    for entry, message in (
        ("", "'' does not start with a DQN script: dqn_atari.py, dqn_atari_vec.py, dqn_atari_mp.py"),
        ("dqn_atari_vec.py 'oops", '"dqn_atari_vec.py \'oops" cannot be split as a shell would: No closing quotation'),
        (
            "dqn_atari_mp.py --batch-size 0",
            "'dqn_atari_mp.py --batch-size 0': dqn_atari_mp.py refuses its flags: "
            "argument --batch-size: must be an integer in [1, 2**62], got 0",
        ),
        (  # the phase's own flags, checked with the setting's: its 1,000 warm-up steps are too few for this batch
            "dqn_atari_vec.py --batch-size 2000",
            "'dqn_atari_vec.py --batch-size 2000': dqn_atari_vec.py refuses its flags: "
            "argument --learning-starts: must be at least --batch-size (2000)",
        ),
    ):
        assert refused(dqn_speed.main, ["--settings", mp, entry], capsys) == f"argument --settings: {message}"
    assert os.listdir(in_tmp) == []
    # each learns for 500 updates at least (the reference's 4,000 steps at K=4), its own flags last
    learn = ["--total-timesteps", "5000", "--learning-starts", "1000", "--learn-steps-period", "4"]
    for entry, total, sampled in ((vec, 17_000, 8), (mp, 9_000, 8), ("dqn_atari.py --batch-size 64", 5_000, 16)):
        script, flags, per_step = dqn_speed.learning_setting(entry, learn)
        parsed = sweep_tool.load_script(os.path.join(ROOT, script)).parse_args(flags)
        assert (script, parsed.total_timesteps, per_step) == (entry.split()[0], total, sampled)
        assert flags[-len(entry.split()) + 1 :] == entry.split()[1:]
    _, flags, _ = dqn_speed.learning_setting(f"{vec} --total-timesteps 30000", learn)
    assert sweep_tool.load_script(os.path.join(ROOT, "dqn_atari_vec.py")).parse_args(flags).total_timesteps == 30_000


def test_ppo_speed_sets_pqn_against_its_network_passes_and_the_emulator():
    proc = run_tool("ppo_speed.py", "--script", "pqn_atari.py", "--iterations", 1, "--bound-iterations", 1, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "pqn_atari.py defaults: BreakoutNoFrameskip-v4, 8 envs x 128 steps, 4 epochs x 4 minibatches of 256" in proc.stdout
    found = re.search(
        r"^bound ([\d,]+) steps/s \| script ([\d,]+) steps/s \| ratio ([\d.]+)% .* "
        r"bound with the emulator ([\d,]+) steps/s, script at ([\d.]+)% of it",
        proc.stdout,
        re.M,
    )
    bound, rate, ratio, with_emulator, ratio_with_emulator = (float(g.replace(",", "")) for g in found.groups())
    assert 0 < with_emulator < bound and rate > 0  # the emulator's time only adds to the bound's
    rounding = 100 * rate / bound * (0.5 / rate + 0.5 / bound) + 0.05  # the rates are printed to the step/s, the ratio to 0.1%
    assert ratio == pytest.approx(100 * rate / bound, abs=rounding) and ratio < ratio_with_emulator


def refused(main, argv, capsys):
    """main(argv) stops with a usage error: exit status 2, no traceback. Its message, after 'error: '."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    return err.strip().splitlines()[-1].split("error: ", 1)[1]


def not_now(*args, **kwargs):
    raise AssertionError("bad input must be refused before this")


def test_compare_refuses_a_plot_it_cannot_write_and_an_export_file_before_reading_runs(in_tmp, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    hand_made(in_tmp, "a1", [(1000, 2, 60)])
    (in_tmp / "afile").write_text("")
    (in_tmp / "folder.png").mkdir()
    for name in ("read_run", "read_csv", "write_csv"):
        monkeypatch.setattr(compare, name, not_now)
    run = str(in_tmp)
    missing = in_tmp / "no" / "such"
    assert refused(compare.main, [run, "--plot", str(missing / "x.png")], capsys) == (
        f"argument --plot: no folder {missing} to write it into"
    )
    for name in ("out.txt", "curves"):  # an extension matplotlib has no writer for, or none
        message = refused(compare.main, [run, "--plot", name], capsys)
        assert message.startswith(f"argument --plot: {name}: matplotlib writes only .") and message.endswith(" files")
        listed = message.split("writes only ")[1].removesuffix(" files").split(", ")
        assert ".png" in listed and ".pdf" in listed and ".txt" not in listed and "." not in listed
    assert (
        refused(compare.main, [run, "--plot", "folder.png"], capsys) == "argument --plot: folder.png is a folder, not a file"
    )
    assert refused(compare.main, [run, "--export", "afile"], capsys) == "argument --export: afile is a file, not a folder"
    assert refused(compare.main, [run, "--export", "afile/x"], capsys) == (
        "argument --export: cannot make the folder afile/x: Not a directory"
    )
    assert refused(compare.main, [run, "--reach", "nan"], capsys) == "argument --reach: must be a finite score, got nan"
    # by the command line too
    assert run_bad("experiments/compare.py", [run, "--plot", "out.txt"], in_tmp).startswith(
        "compare.py: error: argument --plot: out.txt: matplotlib writes only ."
    )


def test_compare_without_matplotlib_prints_the_table_and_refuses_only_plot(in_tmp, monkeypatch, capsys):
    hand_made(in_tmp, "a1", [(1000, 2, 60)])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    for plot in ("curves.png", "out.txt"):  # what is missing is said first
        assert refused(compare.main, [str(in_tmp), "--plot", plot], capsys) == (
            "argument --plot: needs matplotlib: pip install matplotlib"
        )
    compare.main([str(in_tmp)])
    assert "| dqn_atari | PongNoFrameskip-v4 |" in capsys.readouterr().out


def test_sweep_refuses_bad_runs_budget_seeds_and_folders_before_starting(in_tmp, monkeypatch, capsys):
    assert run_bad("experiments/sweep.py", ["--runs", ""], in_tmp).startswith(
        "sweep.py: error: argument --runs: an empty entry"
    )
    monkeypatch.setattr(subprocess, "Popen", not_now)  # (after run_bad: it runs the tool in a subprocess)
    (in_tmp / "afile").write_text("")
    run = ["--runs", "dqn_atari.py"]
    assert refused(sweep_tool.main, ["--runs", ""], capsys) == (
        "argument --runs: an empty entry '': each is a script and its flags, e.g. 'dqn_atari.py'"
    )
    assert refused(sweep_tool.main, ["--runs", "dqn_atari.py", "x 'unterminated"], capsys) == (
        'argument --runs: "x \'unterminated" cannot be split as a shell would: No closing quotation'
    )
    assert refused(sweep_tool.main, [*run, "--out", "afile"], capsys) == "argument --out: afile is a file, not a folder"
    for script in ("./dqn_atari.py", os.path.join(ROOT, "dqn_atari.py"), "experiments/compare.py", "README.md"):
        assert refused(sweep_tool.main, ["--runs", script], capsys) == (
            f"argument --runs: {script!r} is not one of the scripts, named without a folder: dqn_atari.py, "
            "dqn_atari_vec.py, dqn_atari_mp.py, a2c_batched.py, ppo_atari.py, pqn_atari.py"
        )
    for flag in ("-h", "--he", "--help", "--res=runs/x", "--resume"):  # argparse reads --he as --help
        assert refused(sweep_tool.main, ["--runs", f"dqn_atari.py {flag}"], capsys).endswith("no --resume, no --help")
    assert refused(sweep_tool.main, [*run, "--out", "afile/x"], capsys) == (
        "argument --out: cannot make the folder afile/x/logs: Not a directory"
    )
    assert refused(sweep_tool.main, [*run, "--total-timesteps", "0"], capsys) == (
        "argument --total-timesteps: must be a positive integer, got 0"
    )
    for seeds, bad in ((["1", "-1"], "-1"), ([str(2**30 + 1)], str(2**30 + 1))):
        assert (
            refused(sweep_tool.main, [*run, "--seeds", *seeds], capsys)
            == f"argument --seeds: each must be an integer in [0, 2**30], got {bad}"
        )
    assert refused(sweep_tool.main, [*run, "--seeds", "1", "2", "1"], capsys) == (
        "argument --seeds: each seed once, got 1 more than once"
    )
    assert os.listdir(in_tmp) == ["afile"]  # no sweep/, no results


def test_benchmarks_refuse_bad_numbers_and_folders_before_starting(in_tmp, monkeypatch, capsys):
    import checkpoint_pause
    import dqn_speed
    import gpu_check
    import resume_kill

    # mp_kill.py, by the command line: nan is not >= 0 either (time.sleep would refuse it once the runs had started)
    assert run_bad("benchmark/mp_kill.py", ["--max-delay", "nan"], in_tmp) == (
        "mp_kill.py: error: argument --max-delay: must be a finite number of seconds >= 0, got nan"
    )
    assert run_bad("benchmark/mp_kill.py", ["--seed", "-5"], in_tmp) == (
        "mp_kill.py: error: argument --seed: must be in [0, 2**30 - --tries] = [0, 1,073,741,774], got -5"
    )
    # ppo_speed.py: 10**5 threads crashed the emulator; 10**9 iterations' actions need terabytes
    assert run_bad("experiments/ppo_speed.py", ["--threads", str(os.cpu_count() + 1)], in_tmp) == (
        f"ppo_speed.py: error: argument --threads: must be at most the {os.cpu_count()} cores here, got {os.cpu_count() + 1}"
    )
    assert run_bad("experiments/ppo_speed.py", ["--iterations", "10001"], in_tmp) == (
        "ppo_speed.py: error: argument --iterations: must be at most 10,000, got 10001"
    )
    monkeypatch.setattr(subprocess, "Popen", not_now)  # no run of a script starts (subprocess.run too)
    monkeypatch.setattr(dqn_speed, "bare_update_rate", not_now)  # dqn_speed's first measurement
    monkeypatch.setattr(checkpoint_pause.dqn_atari, "parse_args", not_now)  # checkpoint_pause's first step
    cases = [
        (dqn_speed, ["--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
        (
            dqn_speed,
            ["--threads-counts", "1", str(os.cpu_count() + 1)],
            f"argument --threads-counts: each N must be an integer from 1 to the {os.cpu_count()} cores here",
        ),
        (
            dqn_speed,
            ["--learn-steps-periods", "4", "4001"],
            "argument --learn-steps-periods: each K must be an integer from 1 to 1,000",
        ),
        (dqn_speed, ["--seconds", "-1"], "argument --seconds: must be a finite number of seconds, 1 or more, got -1.0"),
        (dqn_speed, ["--seconds", "0"], "argument --seconds: must be a finite number of seconds, 1 or more, got 0.0"),
        (resume_kill, ["--max-delay", "-1"], "argument --max-delay: must be a finite number of seconds >= 0, got -1.0"),
        (resume_kill, ["--tries", "0"], "argument --tries: must be a positive integer, got 0"),
        (resume_kill, ["--save-every", "0"], "argument --save-every: must be an integer in [1, 2**62], got 0"),
        (
            resume_kill,
            ["--save-every", str(2**62 + 1)],
            f"argument --save-every: must be an integer in [1, 2**62], got {2**62 + 1}",
        ),
        (checkpoint_pause, ["--dir", "nowhere"], "argument --dir: no folder nowhere that this user can write into"),
        (checkpoint_pause, ["--rate", "0.5"], "argument --rate: must be a number of steps/s from 1 to 1,000,000, got 0.5"),
        (checkpoint_pause, ["--rate", "inf"], "argument --rate: must be a number of steps/s from 1 to 1,000,000, got inf"),
        (checkpoint_pause, ["--dir", "/proc"], "argument --dir: cannot make a folder in /proc: "),
        (checkpoint_pause, ["--checkpoints", "0"], "argument --checkpoints: must be a positive integer, got 0"),
        (checkpoint_pause, ["--save-every", "0"], "argument --save-every: must be a positive integer, got 0"),
        (gpu_check, ["--timeout", "-1"], "argument --timeout: must be a finite number of seconds above 0, got -1.0"),
        (gpu_check, ["--timeout", "0"], "argument --timeout: must be a finite number of seconds above 0, got 0.0"),
        (gpu_check, ["--threads", "0"], "argument --threads: must be at least 1, got 0"),
        (gpu_check, ["--cpu-threads", "2", "-1"], "argument --cpu-threads: must be at least 1, got -1"),
        (gpu_check, ["--workers-counts", "0", "2"], "argument --workers-counts: must be at least 1, got 0"),
    ]
    for tool, argv, message in cases:
        assert refused(tool.main, argv, capsys).startswith(message), (tool.__name__, argv)
    assert os.listdir(in_tmp) == []


def test_compare_finds_a_run_once_whatever_its_path_and_reaches_a_fractional_score(tmp_path):
    for run in ("A", "B"):  # two run directories, and A's CSV beside them
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "events.out.tfevents.1.vm").write_bytes(b"")
    (tmp_path / "csv").mkdir()
    hand_made(tmp_path / "csv", "A", [(1000, 1.1, 60)])
    found = compare.find_runs([f"{tmp_path}/runs/A/", f"{tmp_path}/runs/B/", str(tmp_path / "csv")])
    assert sorted(os.path.basename(os.path.normpath(path)) for path in found) == ["A", "B"]  # a slash drops no run
    run = {"curve": (list(range(11)), list(range(11)), [1.0] + [1.1] * 10)}
    assert compare.reached_at(run, 1.1, 10) == 10  # ten games of 1.1 sum to 10.999999999999998 in floating point
    assert compare.reached_at(run, 1.1000001, 10) is None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stopped_tool_ends_in_one_line_and_leaves_nothing_behind(signum, tmp_path):
    """Every tool but sweep.py (its own) ends through stopping.run_until_stopped: kill and a closed terminal as
    Ctrl-C, its cleanup run (here checkpoint_pause.py's run directory, some 35 MB, deleted); no traceback."""
    for tool in ("checkpoint_pause", "cleanrl_speed", "dqn_speed", "gpu_check", "mp_kill", "ppo_speed", "resume_kill"):
        with open(tool_path(f"{tool}.py")) as f:
            assert f.read().endswith("    sys.exit(run_until_stopped(main))\n"), tool
    command = [sys.executable, tool_path("checkpoint_pause.py"), "--buffer-size", "1000"]
    command += ["--save-every", "500", "--checkpoints", "100", "--rate", "100", "--dir", str(tmp_path)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while "ring filled" not in proc.stdout.readline():  # the ring's checkpoints first; then the paced steps
        assert proc.poll() is None
    assert os.listdir(tmp_path)  # its run directory, while it runs
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum and err == f"checkpoint_pause.py: stopped by {signum.name}\n", err
    assert os.listdir(tmp_path) == []


def test_same_values_finds_every_value_that_changed_and_refuses_bad_input(tmp_path, capsys):
    """same_values.py --compare: SAME where two records agree, DIFFER naming the tag (or file) where one value
    does; exit status 1 then. Bad input: one line, exit status 2, nothing made."""
    import same_values

    values = ["dqn_atari.py losses/td_loss [(100, 0.5), (200, 0.25)]", "ppo_atari.py charts/episodic_return [(9, 2.0)]"]
    for name, changed in (("old", values[0]), ("new", values[0].replace("0.25", "0.2500001"))):
        os.makedirs(tmp_path / name)
        (tmp_path / name / "values.txt").write_text("\n".join([changed, values[1]]) + "\n")
        (tmp_path / name / "files.txt").write_text("dqn_atari.py checkpoint.pt\n")
    assert not same_values.compare(str(tmp_path / "old"), str(tmp_path / "new"))
    out = capsys.readouterr().out
    assert "values dqn_atari.py     DIFFER: losses/td_loss" in out and "values ppo_atari.py     SAME (1)" in out
    assert "files  dqn_atari.py     SAME (1)" in out and "a2c_batched.py" not in out  # a script neither recorded
    assert same_values.compare(str(tmp_path / "old"), str(tmp_path / "old"))
    assert "DIFFER" not in capsys.readouterr().out
    for args, why in [
        (["--out", str(tmp_path / "old")], "argument --out: "),
        (["--out", str(tmp_path / "x"), "--compare", str(tmp_path)], "argument --compare: "),
        (["--out", str(tmp_path / "x"), "--repo", str(tmp_path)], "argument --repo: "),
    ]:
        proc = run_tool("same_values.py", *args)
        assert proc.returncode == 2 and why in proc.stderr.splitlines()[-1] and "Traceback" not in proc.stderr
    assert not os.path.exists(tmp_path / "x")
