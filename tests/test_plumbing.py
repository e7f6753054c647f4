"""The plumbing/ package on its own: what the scripts share to run safely changes nothing learnt, and it is
one package that every script imports, that imports no script (each script's own behaviour with it is
tested in the scripts' test files, and run for run in test_long_runs.py and test_resume.py)."""

import ast
import glob
import os

import ale_py
import gymnasium
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
