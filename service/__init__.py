"""meltwater.service: the long-running service behind `meltwater serve --config FILE`.

Pipelines (table -> sink) run as Spark Structured Streaming queries over the `meltwater`
source, one SparkSession per service; `config` validates the TOML file (its tables read by
`toml_reader`) into `config_model`'s settings, `errors` holds what the service refuses,
`runner` starts and stops everything, `checkpoints` keeps one service per checkpoint,
`pipeline` turns query progress into metrics (`metrics`), health and the progress line
(`progress`), `failures` judges a failed query (restart or stop), `table_head` knows each
table's newest snapshot for the lag, `spark_output` sends the JVM's output to its log,
`logs` formats structured logs.
"""
