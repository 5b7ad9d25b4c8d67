"""Simulated RocketMQ broker fleets: the simulator (`./run.sh simulate`) and the soak run
(`./run.sh soak`), which publish broker events the way real brokers do."""
