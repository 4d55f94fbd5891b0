"""The names of the topics a Kafka sink writes beside its own, after Debezium's: what it
calls the topic prefix, the transaction topic and the heartbeat topic."""

from __future__ import annotations


def topic_prefix(topic: str) -> str:
    """What Debezium calls `topic.prefix`, for a topic named `<prefix>.<...>`: its first
    dotted name (`lake.sales.orders` -> `lake`)."""
    return topic.split(".")[0]


def default_transaction_topic(topic: str) -> str:
    """Where a topic's transaction metadata goes unless the configuration says: Debezium's
    `<prefix>.transaction` (`lake.sales.orders` -> `lake.transaction`)."""
    return f"{topic_prefix(topic)}.transaction"


def heartbeat_topic(topic: str) -> str:
    """Debezium's heartbeat topic, `__debezium-heartbeat.<prefix>`."""
    return f"__debezium-heartbeat.{topic_prefix(topic)}"
