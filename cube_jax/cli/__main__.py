"""``python -m cube_jax.cli`` runs the same command line as ``cube-jax``."""
import sys

from cube_jax.cli import main

sys.exit(main())
