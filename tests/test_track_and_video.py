"""--track (a Weights & Biases run, read back offline: nothing is sent) and --capture-video (the
evaluation games filmed on the real screen, in colour), on real Breakout.

    python -m pytest tests/test_track_and_video.py -q --durations=0
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT, assert_refused, read_scalars

import a2c_batched
import dqn_atari
import dqn_atari_mp
import dqn_atari_vec
import plumbing.evaluation
import ppo_atari
import pqn_atari

SCRIPTS = [dqn_atari, dqn_atari_vec, dqn_atari_mp, a2c_batched, ppo_atari, pqn_atari]
SCREEN = (210, 160, 3)  # Atari's own screen, in colour


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)
def test_track_without_wandb_fails_at_once(script, in_tmp, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as where it is not installed
    assert_refused(script.main, ["--track"], "--track: needs wandb: pip install wandb", capsys)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)
def test_capture_video_without_an_ffmpeg_program_fails_at_once(script, in_tmp, monkeypatch, capsys):
    """imageio-ffmpeg installed, but no ffmpeg program where it looks (here IMAGEIO_FFMPEG_EXE names a file
    that is not there): refused before the run, not after it, when the films are to be made."""
    pytest.importorskip("imageio_ffmpeg")
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(in_tmp / "no_ffmpeg"))
    argv = ["--save-model", "--capture-video", "--total-timesteps", "64", "--eval-episodes", "1"]  # short, had it run
    assert_refused(script.main, argv, "--capture-video: imageio-ffmpeg finds no ffmpeg program", capsys)


def test_track_without_an_api_key_fails_at_once(tmp_path):
    """No W&B key and no terminal to ask for one: each script stops before its run begins, not after.
    The six run one after the other in one process, each as `python SCRIPT --track` runs it: torch
    and wandb start once, not six times."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")} | {"HOME": str(tmp_path)}
    program = (
        f"import runpy, sys; sys.path.insert(0, {ROOT!r})\n"  # as `python SCRIPT` puts the script's folder first
        f"for script in {[os.path.join(ROOT, f'{script.__name__}.py') for script in SCRIPTS]!r}:\n"
        "    sys.argv = [script, '--track']\n"
        "    try:\n"
        "        runpy.run_path(script, run_name='__main__')\n"
        "    except SystemExit as stop:\n"
        "        print(f'exit status {stop.code}', file=sys.stderr)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    ends = [i for i, line in enumerate(lines) if line.startswith("exit status ")]
    assert len(ends) == len(SCRIPTS), run.stderr
    for script, end in zip(SCRIPTS, ends):
        assert lines[end] == "exit status 2", run.stderr
        assert lines[end - 1].startswith(f"{script.__name__}.py: error: argument --track: No API key configured.")
        assert lines[end - 1].endswith("Or keep the run on disk: WANDB_MODE=offline")
    assert not os.path.exists(tmp_path / "runs")


def test_track_without_a_network_stops_before_the_run(tmp_path):
    """A W&B key, but W&B cannot be reached (here its address refuses every connection): the script
    stops with one line saying so, before its games start, and takes back the run directory it made.
    One script: start_wandb and new_run_dir are the same in all six (test_long_runs.py checks it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")} | {"HOME": str(tmp_path)}
    env.update(WANDB_API_KEY="0" * 40, WANDB_BASE_URL="http://127.0.0.1:9", WANDB_INIT_TIMEOUT="2", WANDB_SILENT="true")
    command = [sys.executable, os.path.join(ROOT, "ppo_atari.py"), "--track"]
    run = subprocess.run(command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.splitlines()[-1].startswith("error: --track: W&B did not start the run (")
    assert run.stderr.splitlines()[-1].endswith("connection refused). Or keep it on disk: WANDB_MODE=offline")
    assert "steps on" not in run.stdout  # the line that opens the run's games
    assert os.listdir(tmp_path / "runs") == []


def random_q_network(rng, chosen):
    """A Q-network for dqn_atari.py's evaluate: a random greedy action each time it is asked, noted in `chosen`."""

    def q_network(obs):
        chosen.append(int(rng.integers(4)))
        return torch.nn.functional.one_hot(torch.tensor([chosen[-1]]), 4).float()

    return q_network


def test_capture_video_films_the_scored_games_on_the_real_screen(tmp_path):
    """Two evaluation games of random actions, filmed; then the same actions replayed on a plain
    AtariGames: the videos hold one frame for each step of their game and one for its start."""
    pytest.importorskip("imageio_ffmpeg")
    import imageio.v3 as iio

    chosen = []
    returns = dqn_atari.evaluate(random_q_network(np.random.default_rng(6), chosen), "breakout", 7, 2, 0.0, "cpu", tmp_path)
    assert sorted(os.listdir(tmp_path)) == [f"eval_game_{i}{kind}.mp4" for i in (0, 1) for kind in ("", "_agent")]

    games, steps, replayed = dqn_atari.AtariGames("breakout", 1, 7), [0], []
    while len(replayed) < 2:
        games.send(np.array([chosen.pop(0)]))  # evaluate asks the network every step; AtariGames plays its own where it must
        finished = games.recv()[2]
        steps[-1] += 1
        replayed += [score for score, _ in finished]
        steps += [0] * len(finished)
    assert returns == replayed and not chosen, "capturing changes neither the games nor their scores"
    assert returns[0] > 0, "a game with points on the screen"
    for i, frames_count in enumerate([1 + steps[0], steps[1]]):  # game 1 opens with the step that resets it
        screen = iio.imread(os.path.join(tmp_path, f"eval_game_{i}.mp4"))
        view = iio.imread(os.path.join(tmp_path, f"eval_game_{i}_agent.mp4"))
        assert screen.shape == (frames_count, *SCREEN) and view.shape == (frames_count, 336, 336, 3)
        spread = lambda frames: frames.max(-1) - frames.min(-1)  # noqa: E731 (of a pixel's channels: 0 when gray)
        assert (spread(screen[::10]) > 60).mean() > 0.05, "in colour: Breakout's rows of bricks"
        assert spread(view[::10, ::4, ::4]).max() <= 12, "the agent's view is gray"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)
def test_every_evaluation_films_its_games(script, tmp_path):
    """Each script's own evaluate, given a video folder, films each game it plays with the shared code
    (evaluation_games and VideoRecorder are the same in every script: test_long_runs.py checks it)."""
    pytest.importorskip("imageio_ffmpeg")
    import imageio.v3 as iio

    torch.manual_seed(0)
    network = (script.Agent if hasattr(script, "Agent") else script.QNetwork)(4)
    returns = script.evaluate(network, "breakout", 7, 2, 0.5, "cpu", tmp_path)  # half the actions random: short games
    assert len(returns) == 2
    assert sorted(os.listdir(tmp_path)) == [f"eval_game_{i}{kind}.mp4" for i in (0, 1) for kind in ("", "_agent")]
    for i in (0, 1):  # whole films, not their first frames: the screen and the agent's view, frame for frame
        screen = iio.imread(os.path.join(tmp_path, f"eval_game_{i}.mp4"))
        view = iio.imread(os.path.join(tmp_path, f"eval_game_{i}_agent.mp4"))
        assert len(screen) > 20 and screen.shape == (len(screen), *SCREEN) and view.shape == (len(screen), 336, 336, 3)


def test_capture_video_refuses_to_film_another_game(tmp_path):
    """The filmed game is checked against the scored one at every step: here its emulator has another seed."""
    pytest.importorskip("imageio_ffmpeg")
    games = dqn_atari.AtariGames("breakout", 1, 7)
    recorder = plumbing.evaluation.VideoRecorder(games.envs, "breakout", 8, tmp_path, games.obs[0, -1])
    with pytest.raises(RuntimeError, match="the filmed game is not the scored one"):
        for _ in range(100):
            recorder.send(np.array([1]))
            recorder.recv()
    recorder.close()


def wandb_records(offline_dir):
    """The records of an offline W&B run, from its .wandb file: after a 7-byte header, a LevelDB
    log (32 KiB blocks of chunks, each with a 7-byte header: checksum, length, kind)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(os.path.join(offline_dir, "run-*.wandb"))
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B"
    records, pos, chunks = [], 7, b""
    while pos + 7 <= len(data) and data[pos + 6] != 0:  # kind 0: the zeros after the last record
        if 32768 - pos % 32768 < 7:  # too little room left in a block for a header: padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunks += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last chunk of one
            records.append(wandb_internal_pb2.Record.FromString(chunks))
            chunks = b""
    return records


def test_track_mirrors_the_run_into_an_offline_wandb_run(tmp_path, monkeypatch):
    """A short training run with --track, offline, its evaluation game filmed: the W&B run holds every
    TensorBoard scalar, the flags, the run directory's name, the script's code and the game's video.
    Resumed to a larger total, it goes on in the same W&B run (the same id), and its new evaluation's
    videos go beside the first ones, which stay as they were."""
    pytest.importorskip("wandb")
    pytest.importorskip("imageio_ffmpeg")
    shutil.copy(os.path.join(ROOT, "dqn_atari.py"), tmp_path)  # run from its folder: W&B saves code found there
    shutil.copytree(os.path.join(ROOT, "plumbing"), tmp_path / "plumbing")  # which it imports
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true")
    env.update({f"WANDB_{kind}_DIR": str(tmp_path / kind.lower()) for kind in ("CONFIG", "CACHE", "DATA")})
    env.update(WANDB_DIR=str(tmp_path))
    flags = ["--total-timesteps", "200", "--learning-starts", "50", "--learn-steps-period", "1", "--batch-size", "8"]
    flags += ["--buffer-size", "1000", "--save-model", "--capture-video", "--eval-episodes", "1", "--eval-epsilon", "0.5"]
    flags += ["--keep-checkpoint"]  # the run can go on to a larger total

    def dqn_atari_py(*args):
        proc = subprocess.run(
            [sys.executable, "dqn_atari.py", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    dqn_atari_py(*flags, "--track")
    (run_dir,) = glob.glob(os.path.join(tmp_path, "runs", "*"))
    (offline_dir,) = glob.glob(os.path.join(tmp_path, "wandb", "offline-run-*"))
    scalars, records = read_scalars(run_dir), wandb_records(offline_dir)

    (run,) = [r.run for r in records if r.HasField("run")]
    assert run.display_name == os.path.basename(run_dir) and run.project == "cleanRL"
    config = {item.key: json.loads(item.value_json) for item in run.config.update if item.key != "_wandb"}
    monkeypatch.setenv("WANDB_MODE", "offline")  # parse_args would ask W&B for an API key otherwise
    assert config == vars(dqn_atari.parse_args(flags + ["--track"]))

    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item} for r in records]
    assert {"charts/SPS", "charts/episodic_return", "losses/td_loss", "eval/episodic_return"} <= set(scalars)
    for tag, (steps, values) in scalars.items():
        logged = [(h["global_step"], h[tag]) for h in history if tag in h]
        np.testing.assert_allclose(logged, np.stack([steps, values], axis=1), rtol=1e-6, err_msg=tag)

    def read(*path):
        with open(os.path.join(*path), "rb") as f:
            return f.read()

    assert read(offline_dir, "files", "code", "dqn_atari.py") == read(ROOT, "dqn_atari.py")
    (video,) = [h for h in history if "videos/eval_game_0/path" in h]
    assert video["videos/eval_game_0/caption"] == f"return {scalars['eval/episodic_return'][1][0]:g}"
    assert read(offline_dir, "files", video["videos/eval_game_0/path"]) == read(run_dir, "videos", "eval_game_0.mp4")

    # --resume (--track is the run's own flag) goes on in the W&B run with the id kept in the run directory
    videos = sorted(os.listdir(os.path.join(run_dir, "videos")))
    assert videos == ["eval_game_0.mp4", "eval_game_0_agent.mp4"]  # the screen, and the agent's view
    first = {video: os.stat(os.path.join(run_dir, "videos", video)).st_mtime_ns for video in videos}
    dqn_atari_py("--resume", run_dir, "--total-timesteps", "300", "--no-keep-checkpoint")
    assert {video: os.stat(os.path.join(run_dir, "videos", video)).st_mtime_ns for video in videos} == first
    assert sorted(os.listdir(os.path.join(run_dir, "videos_2"))) == videos
    offline_dirs = sorted(glob.glob(os.path.join(tmp_path, "wandb", "offline-run-*")))
    assert len(offline_dirs) == 2 and offline_dirs[0] == offline_dir
    run_id = read(run_dir, "wandb_run_id").decode()
    assert len(run_id) == 8 and all(path.endswith(f"-{run_id}") for path in offline_dirs)
    resumed_records = wandb_records(offline_dirs[1])
    assert [r.run.run_id for r in records + resumed_records if r.HasField("run")] == [run_id, run_id]
    resumed_history = [
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item} for r in resumed_records
    ]
    resumed_steps = [h["global_step"] for h in resumed_history if "charts/SPS" in h or "losses/td_loss" in h]
    assert resumed_steps and min(resumed_steps) > 200 and max(resumed_steps) >= 300  # from the checkpoint on
