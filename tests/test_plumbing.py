"""The plumbing/ package on its own: what the scripts share to run safely changes nothing learnt, and it is
one package that every script imports, that imports no script (each script's own behaviour with it is
tested in the scripts' test files, and run for run in test_long_runs.py and test_resume.py)."""

import ast
import errno
import glob
import os

import ale_py
import gymnasium
import numpy as np
import pytest
import test_dqn_atari
import torch
from conftest import ROOT

import dqn_atari
import plumbing.checkpoints
import plumbing.flags
import plumbing.run
from plumbing.flags import rom_name

SCRIPTS = ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py", "a2c_batched.py", "ppo_atari.py", "pqn_atari.py"]


def imported_modules(path):
    """The top-level names of the modules a Python file imports."""
    names = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_every_script_imports_the_package_and_no_other_script():
    scripts = {script[: -len(".py")] for script in SCRIPTS}
    for script in SCRIPTS:
        imported = imported_modules(os.path.join(ROOT, script))
        assert "plumbing" in imported and not imported & scripts, (script, imported & scripts)
    for path in glob.glob(os.path.join(ROOT, "plumbing", "*.py")):
        assert not imported_modules(path) & scripts, path  # the package imports no script


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_algorithms_flags_come_first_in_help(script, capsys):
    """--help lists the script's own flags first, then the run's, shared by every script, in a group of their own."""
    module = __import__(script[: -len(".py")])
    with pytest.raises(SystemExit):
        module.parse_args(["--help"])
    out = capsys.readouterr().out
    first_run_flag, last_algorithm_flag = out.index("--exp-name"), out.rindex("--env-id")
    assert out.index("the run (shared by every script)") < first_run_flag and last_algorithm_flag < first_run_flag
    assert out.index("--total-timesteps") < first_run_flag and out.index("--learning-rate") < first_run_flag


def test_a_checkpoint_of_an_earlier_version_is_refused_in_one_line(in_tmp, capsys):
    """A checkpoint that names no format (every one written before plumbing/) is refused, not misread."""
    run_dir = plumbing.run.new_run_dir("old")
    checkpoint = {"script": "dqn_atari.py", "args": {}, "global_step": 5, "finished": False, "resumable": True, "files": []}
    torch.save(checkpoint, os.path.join(run_dir, "checkpoint.pt"))
    with pytest.raises(SystemExit) as stop:
        dqn_atari.parse_args(["--resume", run_dir])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert err.splitlines()[-1].endswith("was written by an earlier version of the scripts, which this one cannot resume")


def test_rom_names():
    assert rom_name("BreakoutNoFrameskip-v4") == "breakout"
    assert rom_name("ALE/MontezumaRevenge-v5") == "montezuma_revenge"
    assert rom_name("pong") == "pong"
    assert rom_name("Other/Pong-v5") == "" and rom_name("x/y/breakout") == ""
    # every game by the ids ale-py registers in gymnasium (UpNDown and TicTacToe3D defeat a CamelCase split)
    gymnasium.register_envs(ale_py)
    atari_ids = [env_id for env_id, spec in gymnasium.registry.items() if spec.entry_point == "ale_py.env:AtariEnv"]
    assert len(atari_ids) > 300 and "ALE/TicTacToe3D-v5" in atari_ids and "UpNDownNoFrameskip-v4" in atari_ids
    assert all(rom_name(env_id) in ale_py.roms.get_all_rom_ids() for env_id in atari_ids)
    assert rom_name("ALE/TicTacToe3D-v5") == "tic_tac_toe_3d" and rom_name("up_n_down") == "up_n_down"
    assert rom_name("Breakout-v" + "9" * 300) == ""  # a version number that long would overflow the run's name
    # ROMs ALE cannot load for one player (it would end the process), and underscores that are no ROM's
    assert [rom_name(env_id) for env_id in ["combat", "ALE/Warlords-v5", "JoustNoFrameskip-v4", "maze_craze"]] == [""] * 4
    assert rom_name("P_o_n_g") == "" and rom_name("Pong" + "_" * 300) == ""
    assert rom_name("Up_N_Down") == "up_n_down" and rom_name("upndown") == "up_n_down"


def test_a_new_run_never_overwrites_an_old_one(in_tmp):
    first, second = plumbing.run.new_run_dir("same_name"), plumbing.run.new_run_dir("same_name")
    assert first != second and os.path.isdir(first) and os.path.isdir(second)


def test_free_memory_is_none_where_the_system_does_not_tell(monkeypatch):
    """Linux tells; macOS (a sysconf without SC_AVPHYS_PAGES) and Windows (no os.sysconf) do not, and there
    the check is skipped instead of failing."""
    assert plumbing.flags.available_memory_bytes() > 0  # Linux: /proc/meminfo
    test_dqn_atari.hide_meminfo(monkeypatch)
    assert plumbing.flags.available_memory_bytes() > 0  # other Unixes: sysconf
    real_sysconf = os.sysconf

    def sysconf_of_macos(name):
        if name == "SC_AVPHYS_PAGES":
            raise ValueError("unrecognized configuration name")  # what os.sysconf says of a name it lacks
        return real_sysconf(name)

    monkeypatch.setattr(os, "sysconf", sysconf_of_macos)
    assert plumbing.flags.available_memory_bytes() is None
    monkeypatch.delattr(os, "sysconf")  # as on Windows
    assert plumbing.flags.available_memory_bytes() is None


def test_time_left_by_hand():
    time_left = plumbing.run.time_left
    assert time_left(98 * 60 * 150, 150) == "1h38m"  # 5,880 s
    assert time_left(5_879, 1) == "1h37m"  # 1 h 37 min 59 s: rounded down, never up
    assert time_left(10_000_000 - 81_312, 150) == "18h22m"  # the run in the issue: 66,125 s
    assert time_left(59, 1) == "0h00m"
    assert time_left(0, 2_688) == "0h00m"
    assert time_left(-32, 150) == "0h00m"  # a vector step may pass the budget
    assert time_left(360_000 * 100, 100) == "100h00m"
    assert time_left(1000, 0) == time_left(1000, 0.0) == "?"  # no step yet made (a launch step, say)


def test_the_package_imports_each_module_only_after_those_it_needs():
    """No import cycle, not even inside a function: checkpoints.py imports none of the package's modules,
    flags.py checkpoints.py, evaluation.py those two, run.py all three."""
    order = ["checkpoints", "flags", "evaluation", "run"]
    for position, name in enumerate(order):
        with open(os.path.join(ROOT, "plumbing", f"{name}.py")) as f:
            tree = ast.parse(f.read())
        imported = set()
        for node in ast.walk(tree):  # every import, a function's too
            if isinstance(node, ast.ImportFrom) and node.module == "plumbing":
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("plumbing."):
                imported.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("plumbing.")}
        assert imported <= set(order[:position]), (name, imported - set(order[:position]))


@pytest.mark.parametrize("script", ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py"])
def test_a_replay_that_breaks_the_contract_for_resume_is_named(script):
    """Each DQN script's replay keeps REPLAY_FIELDS; one renamed, of another shape, or with a position of
    another kind, is named, with where the contract is written."""
    mod = __import__(script[: -len(".py")])
    problem = plumbing.checkpoints.replay_problem
    assert problem(mod.ReplayMemory(100, 2)) is None
    renamed = mod.ReplayMemory(100, 2)
    renamed.opens = renamed.__dict__.pop("firsts")
    assert problem(renamed) == (
        "--resume needs the replay's `firsts`, an array of (rows, columns): the frame opened an episode "
        "(see plumbing/checkpoints.py, REPLAY_FIELDS)"
    )
    reshaped = mod.ReplayMemory(100, 2)
    reshaped.dones = reshaped.dones[:, 0]
    assert "`dones`" in problem(reshaped)
    per_column = mod.ReplayMemory(100, 2)  # a position per column, but a flag for all: not the contract
    per_column.pos, per_column.full = np.zeros(2, dtype=np.int64), False
    assert "`full`" in problem(per_column)
    listed = mod.ReplayMemory(100, 2)
    listed.pos = [0, 0]  # neither a number nor an array
    assert "`pos`" in problem(listed)


def test_a_run_with_a_replay_that_breaks_the_contract_is_refused_at_its_start(in_tmp, monkeypatch):
    class Renamed(dqn_atari.ReplayMemory):
        def __init__(self, capacity, envs_count):
            super().__init__(capacity, envs_count)
            self.opens = self.__dict__.pop("firsts")

    monkeypatch.setattr(dqn_atari, "ReplayMemory", Renamed)
    with pytest.raises(SystemExit) as refused:
        dqn_atari.main(["--total-timesteps", "100", "--learning-starts", "32", "--buffer-size", "1000"])
    assert str(refused.value.code).startswith("error: --resume needs the replay's `firsts`")


FULL_DISK_RUN = ["--total-timesteps", "500", "--save-every", "100", "--learning-starts", "32", "--buffer-size", "1000"]
FULL_DISK_RUN += ["--batch-size", "4", "--save-model"]


@pytest.mark.parametrize("what", ["checkpoint", "model", "replay", "events"])
def test_a_full_disk_ends_the_run_in_one_line_and_resume_goes_on_from_the_last_checkpoint(what, in_tmp, monkeypatch, capsys):
    """A write that finds the disk full (ENOSPC) mid-run, of the checkpoint, the model or one of the replay's
    files (written in the background): one line naming it and the checkpoint left whole, exit status 1, nothing
    more written; the run resumed once space is freed goes on from that checkpoint to its end."""
    failed, calls = [], []
    real_save, real_write_rows = torch.save, plumbing.checkpoints.write_rows

    def save(data, f, *args, **kwargs):
        calls.append(f.name)
        if f.name.endswith(("checkpoint.pt.tmp" if what == "checkpoint" else "dqn_atari.pt.tmp")) and len(calls) > 4:
            f.write(b"part of a checkpoint")  # the disk filled as it was being written
            failed.append(f.name[: -len(".tmp")])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(data, f, *args, **kwargs)

    def write_rows(path, arrays):
        calls.append(path)
        if len(calls) == 4:
            failed.append(path)
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real_write_rows(path, arrays)

    def add_scalar(self, tag, *args, **kwargs):
        calls.append(tag)
        if tag == "charts/episodic_return" and len(failed) == 0 and glob.glob(f"{self.log_dir}/checkpoint.pt"):
            failed.append(self.file_writer.event_writer._file_name)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_add_scalar(self, tag, *args, **kwargs)

    real_add_scalar = plumbing.run.SummaryWriter.add_scalar
    with monkeypatch.context() as full_disk:
        if what == "replay":
            full_disk.setattr(plumbing.checkpoints, "write_rows", write_rows)
        elif what == "events":  # TensorBoard's thread found the disk full: its writer raises at the next call
            full_disk.setattr(plumbing.run.SummaryWriter, "add_scalar", add_scalar)
        else:
            full_disk.setattr(torch, "save", save)
        with pytest.raises(SystemExit) as stopped:
            dqn_atari.main(FULL_DISK_RUN)
    (run_dir,) = glob.glob("runs/*")
    checkpoint = plumbing.checkpoints.read_checkpoint(run_dir)
    step = checkpoint["global_step"]
    assert 0 < step < 500 and checkpoint["resumable"] and len(failed) == 1
    assert stopped.value.code == (
        f"error: the disk is full: could not write {failed[0]}; the last checkpoint, step {step:,}, is intact: "
        f"free some space, then python dqn_atari.py --resume {run_dir}"
    )
    assert not glob.glob(f"{run_dir}/*.tmp") and "Traceback" not in capsys.readouterr().out
    for name, size in checkpoint["files"]:  # the replay's files the checkpoint names are all there, whole
        assert os.path.getsize(os.path.join(run_dir, name)) == size

    assert dqn_atari.main(["--resume", run_dir]) == run_dir
    out = capsys.readouterr().out
    assert f"{run_dir}: resumed at step {step:,}" in out and "evaluation over 10 games" in out
    assert plumbing.checkpoints.read_checkpoint(run_dir)["global_step"] >= 500


def test_a_write_that_fails_leaves_the_old_file_and_no_part_of_the_new(in_tmp, monkeypatch):
    """save_atomically (the checkpoint, the model) and write_rows (the replay's files) on a disk that fills as
    they write: the old checkpoint stays as it was, no NAME.tmp nor part of a replay file is left, and the
    error names the file it could not write."""
    plumbing.checkpoints.save_atomically({"step": 1}, "checkpoint.pt")

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError) as failed:
        plumbing.checkpoints.save_atomically({"step": 2}, "checkpoint.pt")
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == "checkpoint.pt"
    assert torch.load("checkpoint.pt") == {"step": 1} and os.listdir() == ["checkpoint.pt"]
    with pytest.raises(OSError) as failed:
        plumbing.checkpoints.write_rows("000001.npy", [np.zeros((3, 2), dtype=np.uint8)])
    assert failed.value.filename == "000001.npy" and os.listdir() == ["checkpoint.pt"]
