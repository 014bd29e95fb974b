"""The library behind NSQ's companion tools (nsq_to_file, to_nsq, nsq_tail, nsq_stat); apps/ holds the thin
executables."""
