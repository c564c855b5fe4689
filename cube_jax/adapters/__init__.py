"""Adapters over the core: the PettingZoo ``ParallelEnv``, the JaxMARL ``MultiAgentEnv``
(``cube_jax.adapters.jaxmarl``, imported only when asked for: jaxmarl is an optional extra) and
rendering (text, RGB, GIF)."""
