"""Where the rate limiter's state lives: the store protocol, memory, SQL and Redis."""
