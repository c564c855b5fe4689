"""Checks for user input shared by the core, the symbolic layer and the command line.

The rules, the same everywhere:

* **integers** are Python ``int`` or NumPy integer scalars; a float is accepted only when
  it is integral (``2.0`` is 2, ``2.7`` is refused) and ``bool`` is never an integer;
* **reals** (costs, rewards) are ints or floats, never ``bool``, and must be finite in
  float32, the dtype the environment computes rewards in (``1e39`` is ``inf`` there);
* an error message quotes at most a short excerpt of the input (:func:`excerpt`), so a
  huge or self-similar value costs nothing to report.

>>> as_int(np.int64(4), "n", minimum=1)
4
>>> as_int(2.7, "n")
Traceback (most recent call last):
    ...
ValueError: n must be an integer, got 2.7
>>> excerpt("x" * 500)
"'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... (500 characters)"
"""
from __future__ import annotations

import math
import reprlib
from typing import Optional

import numpy as np

from cube_jax.names import excerpt as _cut

EXCERPT_CHARS = 80

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = 6
_REPR.maxdict = 4
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 30


def excerpt(value, limit: int = EXCERPT_CHARS) -> str:
    """A repr of ``value`` of at most about ``limit`` characters, cheap for any input."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 96:
        # repr of a huge int costs quadratic time (and fails past 4300 digits)
        digits = int(value.bit_length() * math.log10(2)) + 1
        if abs(value) < 10 ** (digits - 1):  # the estimate from the bit length is one too high
            digits -= 1
        return f"an integer of {digits} digits"
    if isinstance(value, (str, bytes)) and len(value) > limit:
        head = repr(value[: limit // 2])
        return f"{head[: limit - 25]}... ({len(value)} characters)"
    try:
        text = _REPR.repr(value)
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to at most ``limit`` characters (for error messages that embed other messages)."""
    return _cut(text, limit, fit=True)


def is_integer(value) -> bool:
    """True for ints and NumPy integer scalars (not bool), and for integral finite floats."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, np.integer)):
        return True
    return isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer()


def as_int(value, name: str, minimum: Optional[int] = None, maximum: Optional[int] = None, why: str = "") -> int:
    """``value`` as a Python int within ``[minimum, maximum]``, or ValueError naming ``name``.

    ``why`` (optional) explains the upper bound in the message.
    """
    if not is_integer(value):
        raise ValueError(f"{name} must be an integer, got {excerpt(value)}")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {excerpt(number)}")
    if maximum is not None and number > maximum:
        reason = f" ({why})" if why else ""
        raise ValueError(f"{name} must be an integer <= {maximum}{reason}, got {excerpt(number)}")
    return number


# The largest finite float32: rewards and costs are float32 arrays inside the environment.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def as_real(value, name: str) -> float:
    """``value`` as a Python float finite in float32, or ValueError naming ``name``.

    >>> as_real(1e39, "deliver_reward")
    Traceback (most recent call last):
        ...
    ValueError: deliver_reward must be a finite number in float32 (|x| <= 3.4028235e+38), got 1e+39
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {excerpt(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or abs(number) > FLOAT32_MAX:
        raise ValueError(f"{name} must be a finite number in float32 (|x| <= {FLOAT32_MAX:.8g}), got {excerpt(value)}")
    return number


# --- limits on world sizes -----------------------------------------------------------------

# The grid side k (k = max(20, n) for the n-curriculum). A reset draws block positions on
# k x k arrays (64 MiB per int32 array at this size) and a scenario's layout is checked on
# one; larger worlds cannot run on one device in reasonable time anyway.
MAX_GRID_SIZE = 4096
# The step counter t is int32: with this cap it can take the step that reaches max_steps
# and one more (a truncated world that is stepped on) without overflowing.
MAX_EPISODE_STEPS = 2**31 - 2
# One environment's observation (float32 values): 1 GiB. The grid form is N x K x K x 6.
MAX_OBSERVATION_VALUES = 2**28
# Seeds of jax.random.PRNGKey keep 32 bits: 2**32 gives the same key as 0.
MAX_SEED = 2**32 - 1
