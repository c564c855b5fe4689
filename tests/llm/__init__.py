"""The language agents: client, replies, the local model and the command line."""
