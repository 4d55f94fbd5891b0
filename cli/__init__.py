"""The `meltwater` command line.

- `entry`: the console script (Arrow's allocator chosen before Arrow loads), then `main`;
- `main`: the parser of every command, and how a command's errors, signals and closed
  pipes end the process;
- `options`: what several commands' parsers share (the table, `--output`, times);
- `table_commands`, `change_commands`, `watch_command`, `serve_command`: each command's
  parser; the first two name their handlers in `snapshots_run`, `scan_run` and
  `changes_run`, which load Arrow and the planner only when such a command runs, so
  `meltwater --help` and `--version` load neither;
- `progress`: the progress line on a terminal; `signals`: Ctrl-C and SIGTERM as
  exceptions, with a watchdog; `arrow_memory`: Arrow's allocator; `import_guard`: keeps
  pandas and numpy out of one-shot commands.
"""
