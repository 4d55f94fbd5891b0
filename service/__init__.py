"""meltwater.service: the long-running service behind `meltwater serve --config FILE`.

Pipelines (table -> sink) run as Spark Structured Streaming queries over the `meltwater`
source, one SparkSession per service; `config` validates the TOML file, `runner` starts and
stops everything, `pipeline` turns query progress into metrics (`metrics`), health and the
progress line (`progress`), `logs` formats structured logs.
"""
