"""The agents: planners and the views they read."""
