"""nsqd's HTTP API on the http_server/ transport: the routes and responders with nsqd's envelopes, router and
checks (which nsqlookupd's API shares), and the shortcuts that answer /pub and /ping without Falcon."""
