"""What nsqd's server (tcp/) and the client (client/) both speak on the wire, so neither imports the other."""
