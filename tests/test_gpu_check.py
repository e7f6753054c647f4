"""experiments/gpu_check.py, CPU only, so that the GPU check cannot rot.

Every run pays torch's start-up, so the suite runs the whole check, with its table of worker
counts, on dqn_atari_mp.py alone (3 runs), and checks in-process that every script takes the
check's flags and logs the tags it looks for.
"""

import glob
import importlib
import inspect
import os
import re
import subprocess
import sys
import types

import pytest
from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmark"))  # stopping.py, mp_kill.py
sys.path.insert(0, os.path.join(ROOT, "experiments"))
import gpu_check as gpu_check_module  # noqa: E402
import mp_kill  # noqa: E402

import plumbing.evaluation  # noqa: E402

pytestmark = pytest.mark.tools  # the tools' tests: -m "not tools" leaves them out

SCRIPTS = ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py", "a2c_batched.py", "ppo_atari.py", "pqn_atari.py"]


def gpu_check(args, tmp_path, env=None):
    """Run the check as a user would, its scratch directories under tmp_path/tmp: (exit status, output)."""
    os.makedirs(tmp_path / "tmp")
    env = dict(os.environ if env is None else env, TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "gpu_check.py"), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    print(proc.stdout)  # pytest shows it where a test fails, and with -rA
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, proc.stdout, proc.stderr


def test_every_script_takes_the_flags_and_names_the_tags_the_check_reads():
    """The check's flags parse in each script, and the tags it reads back are in the script's source (the
    Breakout runs of each script's own tests check that they are logged)."""
    for script in SCRIPTS:
        module = importlib.import_module(script[: -len(".py")])
        for flags in (gpu_check_module.FLAGS[script], gpu_check_module.QUICK_FLAGS[script]):
            module.parse_args([*flags, "--save-model", "--eval-episodes", "1", "--no-cuda"])
        # fewer, larger updates (issue 59): 500 updates after the warm-up, 110 with --quick, at the setting's K and batch
        for quick, settings, updates in (
            (False, gpu_check_module.LARGER_BATCHES, 500),
            (True, gpu_check_module.QUICK_LARGER_BATCHES, 110),
        ):
            if script in settings:
                parsed = module.parse_args(["--no-cuda", *gpu_check_module.larger_batch_flags(script, quick)])
                k = gpu_check_module.flag_value(settings[script], "--learn-steps-period", None)
                batch = gpu_check_module.flag_value(settings[script], "--batch-size", None)
                assert (parsed.learn_steps_period, parsed.batch_size) == (k, batch), (script, quick)
                assert (parsed.total_timesteps - parsed.learning_starts) // k == updates, (script, quick)
        source = inspect.getsource(module)
        for tag in gpu_check_module.LOSSES[script] + ["charts/episodic_return"]:
            assert f'"{tag}"' in source, (script, tag)
    assert '"eval/episodic_return"' in inspect.getsource(plumbing.evaluation)  # every script's evaluation logs it


def test_the_larger_batch_settings_are_the_issues():
    settings = {script: " ".join(flags) for script, flags in gpu_check_module.LARGER_BATCHES.items()}
    assert settings == {
        "dqn_atari_vec.py": "--envs-count 8 --learn-steps-period 32 --batch-size 256",
        "dqn_atari_mp.py": "--workers-count 2 --learn-steps-period 16 --batch-size 128",
    }


def test_the_whole_check_passes_on_the_cpu(tmp_path):
    # One torch thread: the runs are tiny, and on a busy machine more threads only wait for each other.
    # dqn_atari.py too: the base of the larger-batch setting's ratios
    args = ["--cpu-only", "--quick", "--threads", "1", "--scripts", "dqn_atari.py", "dqn_atari_mp.py"]
    args += ["--workers-counts", "1", "2"]
    # 64: more than this machine has, skipped (not 2 here: two threads on a suite's busy cores take 30 s)
    args += ["--cpu-threads", "1", "64"]
    status, out, err = gpu_check(args, tmp_path)
    assert status == 0, out[-3000:] + err[-3000:]
    header = (
        r"\d{4}-\d\d-\d\d \d\d:\d\d \| torch \S+ .*\| GPU: none, --cpu-only.* \| (\d+) CPUs, torch's default (\d+) threads\n"
    )
    found = re.match(header, out)
    assert found, out[:300]
    # the scripts' thread count: a clean torch's own, not the suite's OMP_NUM_THREADS=1
    assert int(found.group(1)) == os.cpu_count() and int(found.group(2)) == gpu_check_module.torch_default_threads()
    assert "| script | CPU as GPU | CPU | CPU as GPU / CPU |" in out
    for script in ["dqn_atari.py", "dqn_atari_mp.py"]:  # a row of numbers: steps/s on both, their ratio
        assert re.search(rf"^\| {re.escape(script)} \| [\d,]+ \| [\d,]+ \| \d+\.\d\d \|$", out, re.M), (script, out[-2000:])
    # each rate is printed as it is measured too (the table alone would be lost to a time limit): the checks' 2, the
    # larger-batch setting, 2 worker counts (2 is the check's own run), 1 thread count
    assert len(re.findall(r"^    learning phase: [\d,]+ steps/s( on the CPU as GPU, [\d,]+ on the CPU)?$", out, re.M)) == 5
    # fewer, larger updates (issue 59), quick: twice the batch at twice K; its rate, as a ratio to dqn_atari.py's too
    assert "\nFewer, larger updates at dqn_atari.py's replay ratio (batch / K), learning phase, steps/s (--quick" in out
    assert "| setting | CPU as GPU | CPU | CPU as GPU / CPU | CPU as GPU: to dqn_atari.py | CPU: to dqn_atari.py |" in out
    larger = re.search(
        r"^\| dqn_atari_mp.py --workers-count 2 --learn-steps-period 8 --batch-size 8 \| ([\d,]+) \| ([\d,]+) \| 1\.00 \| "
        r"(\d+\.\d\d) \| (\d+\.\d\d) \|$",
        out,
        re.M,
    )
    assert larger and larger.group(1) == larger.group(2) and float(larger.group(3)) > 0, out[-3000:]
    assert larger.group(3) == larger.group(4)  # --cpu-only: one run for both columns, as dqn_atari.py's
    assert "not timed: --workers-count 4, 8" in out
    assert re.search(r"^\| 1 \| [\d,]+ \| 1\.00 \|$", out, re.M) and re.search(r"^\| 2 \| [\d,]+ \| \d+\.\d\d \|$", out, re.M)
    assert "dqn_atari.py, learning phase on the CPU by torch threads" in out
    assert re.search(r"^\| 1 \| [\d,]+ \|$", out, re.M)
    assert not re.search(r"^\| 64 \|", out, re.M)
    copy = re.search(
        r"^dqn_atari_mp.py's weight copy for its workers, CPU as GPU to shared CPU memory: (\d+\.\d\d) ms, "
        r"(\d+\.\d)% of a message's time in the learning phase$",
        out,
        re.M,
    )
    assert copy and float(copy.group(1)) > 0 and float(copy.group(2)) > 0, out[-2000:]
    assert out.rstrip().endswith("All checks passed.")
    # every run's files are removed (torch keeps a cache of its own in the temporary directory)
    assert not glob.glob(str(tmp_path / "tmp" / "gpu_check_*")) and not os.path.exists(tmp_path / "runs")


def test_a_failed_check_is_reported(tmp_path):
    # 40 steps: too few for a DQN update to be logged, or a game to end
    args = ["--cpu-only", "--quick", "--threads", "1", "--scripts", "dqn_atari.py", "dqn_atari_vec.py"]
    args += ["--extra=--total-timesteps 40", "--cpu-threads"]  # no thread counts
    status, out, err = gpu_check(args, tmp_path)
    assert status == 1, out[-3000:] + err[-3000:]
    failure = re.search(r"^FAILED, 3 check\(s\):\n- dqn_atari.py: not logged: (.*)$", out, re.M)
    assert failure and failure.group(1).startswith("losses/td_loss, losses/q_values, charts/episodic_return"), out[-2000:]
    larger = "dqn_atari_vec.py --envs-count 2 --learn-steps-period 8 --batch-size 8"  # fewer, larger updates, quick
    assert re.search(rf"^- {larger}: not logged: losses/td_loss, losses/q_values ", out, re.M), out[-2000:]
    assert re.search(r"^\| dqn_atari.py \| failed \| \| \|$", out, re.M)
    assert re.search(rf"^\| {larger} \| failed \| \| \| \| \|$", out, re.M)


def test_without_cuda_it_stops_at_once(tmp_path):
    status, out, err = gpu_check([], tmp_path, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert status == 2 and out == ""
    assert err.startswith("no CUDA device: ") and "--cpu-only" in err, err


def test_a_run_past_its_timeout_is_ended_with_its_workers(tmp_path):
    """--timeout ends dqn_atari_mp.py and its worker processes at once, not the learner alone: workers left
    running would take cores from the next run timed."""
    args = types.SimpleNamespace(extra=[], threads=1, timeout=8.0)
    flags = ["--no-cuda", "--total-timesteps", "100000", "--learning-starts", "100000", "--workers-count", "2"]
    shm_before = set(os.listdir("/dev/shm"))
    with pytest.raises(gpu_check_module.CheckFailed, match="ran past --timeout 8 s"):
        gpu_check_module.run("dqn_atari_mp.py", flags, str(tmp_path), args)
    assert mp_kill.shm_left(shm_before) == []  # the queue's semaphores: its resource tracker was left to remove them
    left = []  # processes still in the run's directory
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if cwd.startswith(str(tmp_path)):
            left.append((pid, cwd))
    assert left == []


def test_flags_a_script_refuses_are_refused_before_the_first_run(tmp_path, monkeypatch, capsys):
    """A --workers-counts or --extra value that a script refuses stops the check before it runs anything
    (it failed each run in turn, after the others had run: an hour, on a GPU)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gpu_check_module, "run", lambda *a, **k: pytest.fail("a run started"))
    check = ["--cpu-only", "--quick", "--scripts", "dqn_atari.py", "dqn_atari_mp.py", "--cpu-threads"]
    for flags, error in (
        (["--workers-counts", str(2**62 + 1)], f"argument --workers-count: must be an integer in [1, 2**62], got {2**62 + 1}"),
        (["--extra=--bogus-flag"], "unrecognized arguments: --bogus-flag"),
    ):
        with pytest.raises(SystemExit) as stop:
            gpu_check_module.main(check + flags)
        assert stop.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"refuses its flags: {error}"), flags
    assert os.listdir(tmp_path) == []
