"""The command line: each command, bad input said in one sentence, startup cost, metrics."""
