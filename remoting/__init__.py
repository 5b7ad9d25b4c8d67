"""RocketMQ's remoting protocol (TCP): frames, codes, bodies, ACL signatures and the front that
serves brokers, clients and mqadmin from the same snapshot and event log as the HTTP API."""
