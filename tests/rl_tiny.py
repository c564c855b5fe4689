"""The tiny PPO budget shared by the tests of PPO's variants (recurrent, blocked moves): 8
envs x 8 steps per update, 2 updates in one chunk, a 1x16 network, 4 evaluation episodes."""

TINY_PPO = (
    "train.num_envs=8",
    "train.num_steps=8",
    "train.total_timesteps=128",  # 2 updates
    "train.update_epochs=1",
    "train.num_minibatches=2",
    "network.hidden=16",
    "network.layers=1",
    "eval.episodes=4",
    "train.updates_per_call=2",
    "train.target_success=null",
)
