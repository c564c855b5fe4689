"""What tests, benchmarks and users' own checks share: stand-ins for the outside world.

* :mod:`~cube_jax.testing.fake_openai`: :class:`FakeOpenAI`, a loopback server that speaks
  the OpenAI Chat Completions protocol, scripted reply by reply (:class:`Reply`: errors,
  slow, cut or malformed replies) or by a ``responder``; :func:`closed_port_url`, a URL
  where nothing listens;
* :mod:`~cube_jax.testing.sound_model`: a scripted model that answers the default prompts
  with the cube paper's heuristic plans (:func:`responder` for :class:`FakeOpenAI`,
  :class:`SoundModel` as a client), so whole language-agent episodes run with no model;
* :mod:`~cube_jax.testing.reference`: a plain-Python reference of the step rules of
  ``DYNAMICS.md``, which the JAX environment is checked against state by state;
* :mod:`~cube_jax.testing.web`: waiting for a condition and reading the web app over HTTP.

Importing these loads the standard library only, and nothing in the package imports them.
"""
from cube_jax.testing.fake_openai import FakeOpenAI, Reply, closed_port_url
from cube_jax.testing.sound_model import SoundModel, responder

__all__ = ["FakeOpenAI", "Reply", "SoundModel", "closed_port_url", "responder"]
