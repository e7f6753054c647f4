import numpy as np
from ale_py.vector_env import AtariVectorEnv
acts = np.random.default_rng(0).integers(0, 4, size=400)
e = AtariVectorEnv("breakout", 1, noop_max=1, frameskip=4, maxpool=True, use_fire_reset=True, stack_num=1,
                   img_height=84, img_width=84, grayscale=True, repeat_action_probability=0.0, reward_clipping=False)
f, info = e.reset(seed=3)
frames, lives, rews = [f[0, -1]], [], []
for a in acts:
    f, r, t, tr, info = e.step(np.array([a]))
    frames.append(f[0, -1]); lives.append(info["lives"][0]); rews.append(r[0])
    if t[0] or tr[0]: break
np.savez("vec.npz", frames=np.array(frames), lives=np.array(lives), rews=np.array(rews), acts=acts)
print(len(frames), info["episode_frame_number"])
