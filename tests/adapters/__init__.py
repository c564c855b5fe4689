"""The adapters: PettingZoo and rendering."""
