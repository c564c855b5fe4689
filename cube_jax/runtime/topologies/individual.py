"""``individual``: no messages; every agent plans on its own (the base rules)."""
from cube_jax.runtime.topologies.base import Topology


class Individual(Topology):
    name = "individual"
