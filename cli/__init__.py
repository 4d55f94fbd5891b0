"""The `meltwater` command line."""
