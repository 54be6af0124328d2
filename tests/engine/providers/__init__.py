"""Each provider kind against its loopback server, and what every kind shares."""
