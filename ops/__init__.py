"""Running the system on one machine: the supervisor behind `./run.sh`, the embedded Kafka
broker, a standalone Spark cluster, and the loopback/process helpers they and the tests,
benchmarks and soak share. Nothing here is part of the data path."""
