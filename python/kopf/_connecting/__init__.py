"""The operator's connections: the logins that give the core its credentials (with or without
the client libraries), its peers, and the servers and tunnels of its webhooks."""
