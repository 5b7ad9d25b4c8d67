"""The events topic as a Kafka client sees it (kafka-python only, no pyspark): creating the
topic, publishing events, and reading offsets. Used by the streaming job's source, the HTTP
writes, the launcher, the simulator, the benchmarks and the remoting front alike."""
