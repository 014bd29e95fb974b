"""nsqd's configuration, which every layer above reads: the options (flags, TOML keys, defaults) and the TLS
context they describe."""
