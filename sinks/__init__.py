"""Destinations for change streams: file archives and database mirrors, exactly once."""
