"""Watching a saved model: playing its evaluation games (the script's `evaluate`), logging and filming them.
Nothing here changes what is learnt: the evaluation runs after training, or instead of it. It imports flags.py
(the game's ROM name); run.py, which imports it, ends the games at once on Ctrl-C (run.play_evaluation)."""

import os

import numpy as np
from ale_py.vector_env import AtariVectorEnv

from plumbing.flags import rom_name


def evaluate_and_log(network, evaluate, args, run_dir, writer, device, model_path=""):
    """Play --eval-episodes whole games (recorded with --capture-video); print and log their scores, as
    eval/episodic_return, or eval_2/... for the model NAME_2.pt of a finished run that went on."""
    video_dir = os.path.join(run_dir, "videos") if args.capture_video else None
    evaluations = 1
    while video_dir and os.path.exists(video_dir):  # a finished run resumed: the earlier evaluation's videos stay
        evaluations += 1
        video_dir = os.path.join(run_dir, f"videos_{evaluations}")
    if video_dir:
        os.makedirs(video_dir)
    returns = evaluate(network, args.env_id, args.seed + 100, args.eval_episodes, args.eval_epsilon, device, video_dir)
    suffix = os.path.basename(model_path)[len(args.exp_name) : -len(".pt")]  # "", or "_2" after NAME_2.pt
    tag = f"eval{suffix}/episodic_return" if suffix else "eval/episodic_return"
    for i, episodic_return in enumerate(returns):  # (at the game's number, as CleanRL logs them)
        writer.add_scalar(tag, episodic_return, i)
    if video_dir and args.track:  # the videos of the screen into the W&B run too, each with its game's score
        import wandb

        videos = [
            wandb.Video(os.path.join(video_dir, f"eval_game_{i}.mp4"), caption=f"return {r:g}") for i, r in enumerate(returns)
        ]
        wandb.log({f"videos/eval_game_{i}": video for i, video in enumerate(videos)})
    scores = ", ".join(f"{r:g}" for r in returns)
    print(f"evaluation over {len(returns)} games: mean return {np.mean(returns):.1f} (scores {scores})", flush=True)


class VideoRecorder:
    """--capture-video: stands in for the evaluation's emulator and films its games, with a second emulator
    beside it of the same game, seed and settings (make_env's) but the real screen (210x160, colour, not a
    max over two frames), given the same actions: deterministic without sticky actions, both play one game,
    checked every step. Each game is videos/eval_game_N.mp4 (the screen) and eval_game_N_agent.mp4 (the 84x84
    view, 4x), at 15 frames a second (60, frame skip 4). `games.envs = VideoRecorder(games.envs, ...)`."""

    def __init__(self, envs, env_id, seed, video_dir, first_view):
        self.envs, self.video_dir, self.games, self.writers = envs, video_dir, 0, None
        settings = dict(noop_max=30, frameskip=4, use_fire_reset=False, stack_num=1, repeat_action_probability=0.0)
        settings |= dict(max_num_frames_per_episode=108_000, episodic_life=False, life_loss_info=False, reward_clipping=False)
        screen = dict(img_height=210, img_width=160, grayscale=False, maxpool=False)  # the real screen, in colour
        self.screen = AtariVectorEnv(rom_name(env_id), 1, **settings, **screen)
        self.record(self.screen.reset(seed=seed)[0][0, -1], first_view)

    def record(self, screen, view):
        if self.writers is None:  # a game's first frame; frames go to ffmpeg as they come, none kept
            import imageio

            names = [f"eval_game_{self.games}.mp4", f"eval_game_{self.games}_agent.mp4"]
            # macro_block_size=1: the screen's own 210x160, not resized to multiples of 16
            self.writers = [imageio.get_writer(os.path.join(self.video_dir, n), fps=15, macro_block_size=1) for n in names]
        self.writers[0].append_data(screen)
        self.writers[1].append_data(np.kron(view, np.ones((4, 4), dtype=np.uint8)))  # 84x84 -> 336x336

    def send(self, actions):
        self.envs.send(actions)
        self.screen.send(actions)

    def recv(self):
        step = frames, rewards, terminations, truncations, infos = self.envs.recv()
        screens, *screen_outcome, screen_infos = self.screen.recv()  # its rewards, terminations, truncations
        same = all(map(np.array_equal, (rewards, terminations, truncations), screen_outcome))
        same = same and all(np.array_equal(infos[key], screen_infos[key]) for key in ("lives", "episode_frame_number"))
        if not same:
            raise RuntimeError(f"--capture-video: the filmed game is not the scored one (game {self.games})")
        self.record(screens[0, -1], frames[0, -1])
        if terminations[0] or truncations[0]:
            for writer in self.writers:
                writer.close()
            self.games, self.writers = self.games + 1, None
        return step

    def close(self):
        self.envs.close()
        self.screen.close()
