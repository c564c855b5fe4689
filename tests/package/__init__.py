"""The package as a whole: the command line, the registry, the layers, public paths, docs and notebooks."""
