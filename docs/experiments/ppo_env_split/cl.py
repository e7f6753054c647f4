import numpy as np, gymnasium as gym, ale_py.registration
ale_py.registration.register_v0_v4_envs()
from stable_baselines3.common.atari_wrappers import MaxAndSkipEnv
d = np.load("vec.npz"); acts = d["acts"]
env = gym.make("BreakoutNoFrameskip-v4")
env.reset(seed=3)
env.unwrapped.ale.act(1)  # FIRE for one raw frame, as AtariVectorEnv's reset with noop_max=1
env = gym.wrappers.GrayScaleObservation(gym.wrappers.ResizeObservation(MaxAndSkipEnv(env, skip=4), (84, 84)))
frames, lives, rews = [], [], []
for a in acts[: len(d["frames"]) - 1]:
    o, r, t, tr, info = env.step(int(a))
    frames.append(o); lives.append(info["lives"]); rews.append(r)
frames = np.array(frames).astype(int); v = d["frames"][1:].astype(int)
diff = np.abs(frames - v)
print("steps", len(frames), "max diff", diff.max(), "mean", diff.mean(), "frames differing >2:", (diff.max(axis=(1, 2)) > 2).sum())
print("lives equal", (np.array(lives) == d["lives"]).all(), "rewards equal", (np.array(rews) == d["rews"]).all(), sum(rews), d["rews"].sum())
i = np.argmax(diff.max(axis=(1, 2))); print("worst step", i, np.argwhere(diff[i] > 2)[:10].tolist())
