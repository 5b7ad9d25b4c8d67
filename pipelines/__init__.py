"""The streaming job: Kafka source, the pure route/KV state machines, the Delta sink."""
