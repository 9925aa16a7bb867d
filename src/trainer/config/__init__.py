"""The run configuration: schemas, their rules, command-line overrides, paths and the checks a run passes before any data."""
