"""The symbolic layer: actions, vocabulary, concepts and both plan executors."""
