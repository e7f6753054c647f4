import runpy, sys
import ale_py.registration  # ale-py 0.12's __init__ skips registering under gymnasium 0.29 (its vector env needs 1.x)
ale_py.registration.register_v0_v4_envs()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
