"""What nsqd's HTTP API, nsqlookupd and nsqadmin share (Go's internal/http_api): the response envelope and answers
(`responses.py`) and the httprouter-like router with nsqd's access log (`router.py`)."""
