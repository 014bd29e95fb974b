"""The broker's surroundings: auth servers, the nsqlookupd loop, statsd, and the context the front doors share."""
