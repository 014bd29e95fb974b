"""Go's behaviour where clients can tell: flag parsing and printing, durations, JSON encoding and decoding,
quoting and host:port rules."""
