"""Solutions: anything with a `run` that takes a definition's inputs by name and returns its outputs."""
