"""Where what outlives one command is kept: this machine's files, or the team's PostgreSQL."""
