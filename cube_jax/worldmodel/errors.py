"""What goes wrong with a world model: raised by the model and by its file alike."""


class WorldModelError(ValueError):
    """A world model that cannot be used: a file that is not one, or input it cannot take."""


class WorldMismatchError(WorldModelError):
    """A world model of one world given the traces or the file of another."""


__all__ = ["WorldMismatchError", "WorldModelError"]
