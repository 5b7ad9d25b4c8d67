"""The cuts readers serve: reading them from the warehouse (`reader`), the served one and the
thread that swaps in newer ones (`store`), whether it is fresh enough to answer — readiness and
read-your-writes (`freshness`) — and cuts of the past (`history`). Flask-free: the HTTP server,
the remoting front, the tools and the notebooks use it."""
