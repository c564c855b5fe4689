"""Public path of the training wrappers (API.md): ``cube_jax.wrappers.AutoResetWrapper``
and ``cube_jax.wrappers.LogWrapper``, defined in :mod:`cube_jax.core.wrappers`."""
from cube_jax.core.wrappers import AutoResetWrapper, LogState, LogWrapper, Wrapper

__all__ = ["AutoResetWrapper", "LogState", "LogWrapper", "Wrapper"]
