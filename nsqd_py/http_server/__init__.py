"""The HTTP/1.1 transport: a lean gevent server for any WSGI app with Go net/http's connection rules (request
heads, bodies, answers, connections) and the access log line. It knows nothing of nsqd; nsqd's API is http_api/,
and nsqlookupd serves its own app on it too."""
